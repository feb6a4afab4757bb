#include "src/engine/loader.h"

#include <cctype>
#include <cmath>

#include "src/backend/backend.h"
#include "src/model/model.h"
#include "src/model/model_source.h"

namespace astrai {

Result<LoadedEngine> load_engine(const std::string& model_or_preset, const std::string& device,
                                 EngineOptions options) {
  LoadedEngine le;
  ASTRAI_ASSIGN_OR_RETURN(le.dir, resolve_model_dir(model_or_preset));
  ASTRAI_ASSIGN_OR_RETURN(le.tokenizer, Tokenizer::load(le.dir));
  BackendOptions bo;
  bo.device = device == "cuda" ? Device::cuda : Device::cpu;
  if (device == "auto") bo.device = Device::cuda;
  auto backend = make_backend(bo);
  if (!backend.ok() && device == "auto") {
    bo.device = Device::cpu;
    backend = make_backend(bo);
  }
  if (!backend.ok()) return backend.status();
  ASTRAI_ASSIGN_OR_RETURN(auto model, Model::load(le.dir, *backend.value()));
  for (int32_t t : le.tokenizer->special_tokens().stop_ids) options.stop_ids.push_back(t);
  ASTRAI_ASSIGN_OR_RETURN(le.engine, Engine::create(std::move(backend).value(), std::move(model), options));
  return le;
}

Result<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return invalid_argument("'" + text + "' is not a size (e.g. 2GiB, 512M, 1000000)");
  double v = 0;
  try {
    v = std::stod(text.substr(0, i));
  } catch (...) {
    return invalid_argument("'" + text + "' is not a size (e.g. 2GiB, 512M, 1000000)");
  }
  std::string unit = text.substr(i);
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return invalid_argument("'" + text + "': unknown size unit '" + text.substr(i) + "' (use K, M, G or T)");
  const double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 9e18)
    return invalid_argument("'" + text + "' is not a usable size");
  return int64_t(bytes);
}

}  // namespace astrai
