// astrai: one binary, subcommands registered by src/cli/cmd_*.cpp.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "src/cli/commands.h"
#include "src/core/status.h"

int main(int argc, char** argv) {
  CLI::App app{"astrai: serve, generate, score and train decoder-only language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "astrai 0.1.0");
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
