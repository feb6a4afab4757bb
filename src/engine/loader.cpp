#include "src/engine/loader.h"

#include <cctype>
#include <cmath>

#include "src/backend/backend.h"
#include "src/model/model.h"
#include "src/model/model_source.h"
#include "src/model/tp_model.h"

namespace astrai {

Result<LoadedModel> load_model(const std::filesystem::path& dir, const std::string& device, int tp,
                               int threads, const LoadOptions& options) {
  if (tp < 1) return invalid_argument("--tp must be at least 1 (got " + std::to_string(tp) + ")");
  BackendOptions bo;
  bo.device = device == "cuda" || device == "auto" ? Device::cuda : Device::cpu;  // auto: cuda when present
  bo.threads = threads;
  auto backend = make_backend(bo);
  if (!backend.ok() && device == "auto") {
    bo.device = Device::cpu;
    backend = make_backend(bo);
  }
  if (!backend.ok()) return backend.status();
  LoadedModel lm;
  lm.backend = std::move(backend).value();
  std::vector<std::unique_ptr<Backend>> others;
  for (int r = 1; r < tp; ++r) {
    BackendOptions ro = bo;
    ro.gpu_index = r;
    auto b = make_backend(ro);
    if (!b.ok())
      return Status(b.status().code(), "--tp " + std::to_string(tp) + " needs " + std::to_string(tp) +
                                           " devices, one per rank: rank " + std::to_string(r) + ": " +
                                           b.status().message());
    others.push_back(std::move(b).value());
  }
  ASTRAI_ASSIGN_OR_RETURN(lm.model, load_tensor_parallel(dir, *lm.backend, std::move(others), options));
  return lm;
}

Result<LoadedEngine> load_engine(const std::string& model_or_preset, const std::string& device,
                                 EngineOptions options, int tp,
                                 const std::optional<ChatTemplateText>& chat_template,
                                 const LoadOptions& load) {
  LoadedEngine le;
  ASTRAI_ASSIGN_OR_RETURN(le.dir, resolve_model_dir(model_or_preset));
  ASTRAI_ASSIGN_OR_RETURN(le.tokenizer, Tokenizer::load(le.dir, {}, chat_template));
  ASTRAI_ASSIGN_OR_RETURN(LoadedModel lm, load_model(le.dir, device, tp, 0, load));
  for (int32_t t : le.tokenizer->special_tokens().stop_ids) options.stop_ids.push_back(t);
  ASTRAI_ASSIGN_OR_RETURN(le.engine, Engine::create(std::move(lm.backend), std::move(lm.model), options));
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
