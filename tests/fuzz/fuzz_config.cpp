// config.json parsing and validation: any text is a ModelConfig that passes validate() and
// survives a to_json() round trip, or an error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "src/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c = astrai::ModelConfig::from_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!c.ok()) return 0;
  if (!c->validate().ok()) std::abort();  // from_json returns only valid configs
  auto again = astrai::ModelConfig::from_json(c->to_json());
  if (!again.ok() || again->to_json() != c->to_json()) std::abort();
  (void)c->num_parameters();
  return 0;
}
