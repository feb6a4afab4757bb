// The structured-output fields of a request, as every dialect that has them spells them (OpenAI
// chat / completions, the WebSocket generate frame, offline JSONL lines):
//   response_format  {"type":"text"} | {"type":"json_object"} |
//                    {"type":"json_schema","json_schema":{"name","schema","strict","description"}}
//   structured_outputs {"json": schema} | {"regex": pattern} | {"choice": [strings]}   (vLLM)
//   guided_json, guided_regex, guided_choice                                      (vLLM before 0.12)
//   json_schema      a schema                                                      (llama.cpp)
// At most one of them constrains a request. A schema or pattern is compiled here once to check it,
// so that a bad one is a 400 naming the keyword before anything runs.
#pragma once

#include <string_view>

#include "src/core/json_fields.h"
#include "src/engine/request.h"

namespace astrai::structured {

// When `key` is one of the fields above: reads it into `out` (handled = true). Errors name the
// field path ("response_format.json_schema.schema.properties.age").
json::MaybeFieldError read_constraint_field(std::string_view key, json::Value& v, ConstraintSpec& out,
                                            bool& handled);

}  // namespace astrai::structured
