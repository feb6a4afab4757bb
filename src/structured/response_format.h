// The structured-output fields of a request, as every dialect that has them spells them (OpenAI
// chat / completions, the WebSocket generate frame, offline JSONL lines):
//   response_format  {"type":"text"} | {"type":"json_object"} |
//                    {"type":"json_schema","json_schema":{"name","schema","strict","description"}}
//   structured_outputs {"json": schema} | {"regex": pattern} | {"choice": [strings]}   (vLLM)
//   guided_json, guided_regex, guided_choice                                      (vLLM before 0.12)
//   json_schema      a schema                                                      (llama.cpp)
// The Responses API (/v1/responses) has the same formats under text.format, with the json_schema
// fields in the format object itself: {"type":"json_schema","name","schema","strict","description"}.
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

// The Responses API's text.format object; `field` is its path in errors ("text.format").
json::MaybeFieldError read_text_format(json::Value& v, const std::string& field, ConstraintSpec& out);

// A forced tool call (Anthropic's tool_choice {"type":"tool","name"}): the output is the JSON call
// {"name":<name>,"arguments":<input>} that the tool-call parser reads as the whole output, its
// arguments valid under `input_schema` (the tool's JSON schema, whose local $refs are re-rooted under
// "arguments"). `field` names the schema in errors ("tools[1].input_schema").
json::MaybeFieldError constrain_to_tool_call(std::string_view name, std::string_view input_schema,
                                             const std::string& field, ConstraintSpec& out);

}  // namespace astrai::structured
