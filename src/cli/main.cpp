// astrai: one binary, subcommands registered by src/cli/cmd_*.cpp.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "src/cli/commands.h"
#include "src/core/status.h"

#ifdef ASTRAI_HAVE_CUDA
#include "gpu/cuda_backend.h"
#endif

int main(int argc, char** argv) {
  CLI::App app{"astrai: serve, generate, score and train decoder-only language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "astrai 0.1.0");
#ifdef ASTRAI_HAVE_CUDA
  // An explicit call rather than a static initialiser in gpu/: the linker drops an unreferenced
  // object of a static library, and with it the registration. Registers only when a GPU is visible.
  astrai::gpu::register_cuda_backend();
#endif
  astrai::cli::register_all(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const astrai::Error& e) {
    std::fprintf(stderr, "astrai: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "astrai: error: %s\n", e.what());
    return 1;
  }
  return astrai::cli::exit_code();
}
