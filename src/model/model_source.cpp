#include "src/model/model_source.h"

#include <cstdlib>
#include <string>

#include "src/model/config.h"
#include "src/model/model_init.h"

namespace astrai {
namespace fs = std::filesystem;

fs::path preset_cache_dir() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
  };
  if (const char* d = env("ASTRAI_CACHE_DIR")) return fs::path(d) / "presets";
  if (const char* d = env("XDG_CACHE_HOME")) return fs::path(d) / "astrai" / "presets";
  if (const char* h = env("HOME")) return fs::path(h) / ".cache" / "astrai" / "presets";
  return fs::temp_directory_path() / "astrai-cache" / "presets";
}

Result<fs::path> resolve_model_dir(std::string_view model_or_preset, uint64_t seed) {
  const fs::path given(model_or_preset);
  std::error_code ec;
  if (!model_or_preset.empty() && fs::is_directory(given, ec)) return given;

  bool is_preset = false;
  for (const std::string& n : preset_names()) is_preset |= n == model_or_preset;
  if (!is_preset) {
    std::string list;
    for (const std::string& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    if (fs::exists(given, ec))
      return invalid_argument("--model '" + std::string(model_or_preset) + "': not a directory");
    return not_found("--model '" + std::string(model_or_preset) + "': no such directory and not a preset (" +
                     list + ")");
  }
  const fs::path dir = preset_cache_dir() / (std::string(model_or_preset) + "-seed" + std::to_string(seed));
  if (fs::exists(dir / "config.json", ec)) return dir;
  InitOptions o;
  o.seed = seed;
  Status s = init_model_dir(model_or_preset, dir, o);
  // Another process may have finished the same preset first: its copy is as good as ours.
  if (!s.ok() && fs::exists(dir / "config.json", ec)) return dir;
  if (!s.ok()) return Status(s.code(), "preset '" + std::string(model_or_preset) + "': " + s.message());
  return dir;
}

}  // namespace astrai
