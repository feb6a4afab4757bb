// Parser: tokens -> syntax tree, following jinja2's grammar and operator precedence (filters
// bind tighter than arithmetic, `is` tests tighter than `not`/`and`/`or`, `**` associates left).
// A construct the interpreter does not implement (include, extends, call blocks, an unknown
// filter or test) is rejected here, naming it and its position.
#pragma once

#include <string_view>

#include "src/core/status.h"
#include "src/tokenizer/chat_template_limits.h"
#include "src/tokenizer/jinja_ast.h"

namespace astrai::jinja {

// Linear in the size of `source`; max_source_bytes and max_nesting of `limits` apply.
Result<Body> parse_template(std::string_view source, const ChatTemplateLimits& limits = {});

}  // namespace astrai::jinja
