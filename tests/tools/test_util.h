// Helpers shared by all test executables: fresh temp dirs, running commands, locating the
// astrai binary and the PyTorch reference scripts. Nothing here reads ../shared.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace astrai::test {

// A new empty directory under $ASTRAI_TEST_TMP (or /tmp), removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "t");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `sh -c cmd` with optional stdin text; captures stdout and stderr.
CommandResult run_command(const std::string& cmd, const std::string& stdin_text = "");

// Path of the built astrai binary ($ASTRAI_BIN), and the source tree ($ASTRAI_SOURCE_DIR).
std::string astrai_bin();
std::filesystem::path source_dir();

// /usr/bin/python3 with torch importable (the reference oracle); tests REQUIRE it.
std::string python3();

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& text);

// Fresh seed per run (time-based), printed by the caller with INFO so failures can be replayed;
// $ASTRAI_TEST_SEED overrides.
uint64_t fresh_seed();

// Token ids as a JSON array: "[1,2,3]".
std::string ids_json(const std::vector<int32_t>& ids);

}  // namespace astrai::test
