#include "src/tokenizer/json_util.h"

namespace astrai::tok {

std::string tame_big_integers(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size())
        out += json[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    if (c >= '0' && c <= '9') {
      size_t e = i;
      while (e < json.size() && json[e] >= '0' && json[e] <= '9') ++e;
      out.append(json.substr(i, e - i));
      const bool fraction_follows = e < json.size() && (json[e] == '.' || json[e] == 'e' || json[e] == 'E');
      if (e - i > 18 && !fraction_follows) out += ".0";
      i = e - 1;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace astrai::tok
