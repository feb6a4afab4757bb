// serve.yaml: any file is a configuration or an error naming the key (never a crash or an uncaught
// yaml-cpp exception); an accepted configuration's values are within each key's documented range.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "net/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/astrai-fuzz-serve-" + std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  astrai::net::ServeConfig c;
  const auto s = astrai::net::load_serve_yaml(path, c);
  if (!s.ok()) {
    if (s.message().empty()) std::abort();
    return 0;
  }
  if (c.port < 0 || c.port > 65535 || c.net_threads < 1 || c.worker_threads < 1 || c.max_body < 1 ||
      c.max_concurrent < 1 || !(c.header_timeout > 0) || !(c.body_timeout > 0) ||
      c.template_limits.max_value_depth > 1024)
    std::abort();
  return 0;
}
