// JSON in and out of the interpreter: message lists arrive as JSON text (parsed as Python's
// json.loads would: objects keep key order, integers stay integers), and the `tojson` filter
// writes json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...) as
// transformers registers it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "src/core/status.h"
#include "src/tokenizer/jinja_value.h"

namespace astrai::jinja {

Result<Value> value_from_json(std::string_view json);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
// Throws RenderError(TypeError) for values JSON cannot hold (undefined, callables, namespaces).
std::string json_dumps(const Value& v, const JsonDumpOptions& opts);

}  // namespace astrai::jinja
