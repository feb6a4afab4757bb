#include "bench/bench_util.h"

#include <filesystem>
#include <sstream>

#include "src/core/status.h"
#include "src/model/model_source.h"

namespace astrai::cli {

std::vector<int> parse_int_list(const std::string& s, const std::string& option) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int v = 0;
    try {
      v = std::stoi(part);
    } catch (const std::exception&) {
      v = 0;
    }
    if (v < 1) throw Error(invalid_argument(option + ": '" + part + "' is not a positive integer"));
    out.push_back(v);
  }
  if (out.empty()) throw Error(invalid_argument(option + " needs at least one value"));
  return out;
}

LoadedModel load_bench_model(const CommonOptions& common, const std::string& model, const std::string& preset,
                             uint64_t seed, int tp) {
  if (model.empty() == preset.empty())
    throw Error(invalid_argument("give exactly one of --model or --preset"));
  const std::string device = common.device == "cuda" || common.device == "cpu" ? common.device
                             : has_backend_factory(Device::cuda)               ? "cuda"
                                                                               : "cpu";
  const std::filesystem::path dir = resolve_model_dir(model.empty() ? preset : model, seed).value();
  return load_model(dir, device, tp, common.threads, cli::load_options(common)).value();
}

}  // namespace astrai::cli
