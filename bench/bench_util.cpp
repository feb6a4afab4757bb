#include "bench/bench_util.h"

#include <sstream>

#include "src/core/status.h"

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

}  // namespace astrai::cli
