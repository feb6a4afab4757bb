#include "src/backend/backend.h"

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "src/backend/cpu/cpu_backend.h"

namespace astrai {
namespace {

struct FactoryRegistry {
  std::mutex mu;
  std::map<Device, BackendFactory> factories;
};

FactoryRegistry& registry() {
  static FactoryRegistry r;
  return r;
}

}  // namespace

int64_t Backend::memory_available() const {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      int64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

void register_backend_factory(Device device, BackendFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.factories[device] = std::move(factory);
}

bool has_backend_factory(Device device) {
  if (device == Device::cpu) return true;
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return r.factories.count(device) > 0;
}

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  if (options.device == Device::cpu) return make_cpu_backend(options.threads);
  BackendFactory factory;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.factories.find(options.device);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory)
    return unsupported(
        "device 'cuda' requested but no CUDA backend is available: this astrai was built without "
        "it (rebuild with -DASTRAI_CUDA=ON on a machine with nvcc) or no GPU is visible; use --device cpu");
  return factory(options);
}

}  // namespace astrai
