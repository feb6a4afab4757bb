#include "src/engine/sampling_defaults.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "src/core/json_fields.h"

namespace astrai {

bool SamplingDefaults::empty() const {
  return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens;
}

void SamplingDefaults::apply(SamplingParams& s) const {
  if (temperature) s.temperature = *temperature;
  if (top_p) s.top_p = *top_p;
  if (top_k) s.top_k = *top_k;
  if (min_p) s.min_p = *min_p;
  if (repetition_penalty) s.repetition_penalty = *repetition_penalty;
}

std::string SamplingDefaults::describe() const {
  std::ostringstream o;
  auto add = [&](const char* name, const auto& v) {
    if (!v) return;
    if (o.tellp() > 0) o << ", ";
    o << name << ' ' << *v;
  };
  add("temperature", temperature);
  add("top_p", top_p);
  add("top_k", top_k);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  add("max_tokens", max_tokens);
  return o.str();
}

Result<SamplingDefaults> parse_sampling_defaults(std::string_view text, const std::string& source,
                                                 std::vector<std::string>* warnings) {
  SamplingDefaults d;
  SamplingParams probe;  // each value alone on otherwise neutral settings, checked by the engine's ranges
  int max_tokens = 1;
  auto err = json::for_each_field(
      text,
      [&](std::string_view key, json::Value& v) -> json::MaybeFieldError {
        const bool sampling = key == "temperature" || key == "top_p" || key == "top_k" || key == "min_p" ||
                              key == "repetition_penalty" || key == "max_new_tokens";
        if (!sampling || json::is_null(v)) return std::nullopt;
        const std::string field(key);
        double x = 0;
        int64_t i = 0;
        if (key == "top_k" || key == "max_new_tokens") {
          if (auto e = json::read_int(v, field, INT32_MIN, INT32_MAX, i)) return e;
        } else if (auto e = json::read_number(v, field, -HUGE_VAL, HUGE_VAL, x)) {
          return e;
        }
        SamplingParams s = probe;
        int mt = max_tokens;
        if (key == "temperature") s.temperature = float(x);
        if (key == "top_p") s.top_p = float(x);
        if (key == "top_k") s.top_k = int(i);
        if (key == "min_p") s.min_p = float(x);
        if (key == "repetition_penalty") s.repetition_penalty = float(x);
        if (key == "max_new_tokens") mt = int(i);
        if (auto bad = validate_sampling(s, mt, 1, 0)) {
          if (warnings) warnings->push_back(source + ": " + field + " " + bad->message + "; not used");
          return std::nullopt;
        }
        if (key == "temperature") d.temperature = s.temperature;
        if (key == "top_p") d.top_p = s.top_p;
        if (key == "top_k") d.top_k = s.top_k;
        if (key == "min_p") d.min_p = s.min_p;
        if (key == "repetition_penalty") d.repetition_penalty = s.repetition_penalty;
        if (key == "max_new_tokens") d.max_tokens = mt;
        return std::nullopt;
      },
      [](simdjson::error_code ec) -> json::MaybeFieldError {
        return json::FieldError{"", std::string("is not valid JSON (") + simdjson::error_message(ec) + ")"};
      },
      []() -> json::MaybeFieldError {
        return json::FieldError{"", "is not a JSON object"};
      });
  if (err)
    return invalid_argument(source + (err->field.empty() ? "" : ": '" + err->field + "'") + " " +
                            err->message);
  return d;
}

Result<SamplingDefaults> read_sampling_defaults(const std::filesystem::path& model_dir,
                                                std::vector<std::string>* warnings) {
  const std::filesystem::path p = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return SamplingDefaults{};
  std::ifstream f(p, std::ios::binary);
  if (!f) return io_error(p.string() + ": cannot read");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_sampling_defaults(text.str(), p.string(), warnings);
}

}  // namespace astrai
