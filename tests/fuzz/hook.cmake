# Included by scripts/fuzz through -DCMAKE_PROJECT_INCLUDE, so the fuzz targets build inside the
# main project (its libraries, flags and dependencies) without a hook in the project's own CMake
# files: includes tests/fuzz/CMakeLists.txt once the top-level CMakeLists.txt has defined every
# library. (Equivalent: `add_subdirectory(fuzz)` in tests/CMakeLists.txt when building with clang.)
# (A deferred call expands its arguments when it runs: keep this directory in a variable.)
set(ASTRAI_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include "${ASTRAI_FUZZ_DIR}/CMakeLists.txt")
