// The tree-walking interpreter. Scoping follows jinja2: `set` inside a for loop body (or a macro)
// is local to that iteration (or call); `if` blocks share their enclosing scope; namespaces are
// the way to carry values out of a loop. Macros see the scope they were defined in, looked up at
// call time.
#pragma once

#include <string>

#include "src/tokenizer/chat_template_limits.h"
#include "src/tokenizer/jinja_ast.h"
#include "src/tokenizer/jinja_value.h"

namespace astrai::jinja {

// Renders `body` with `vars` (name -> value) on top of jinja2's globals (range, namespace, dict,
// joiner, cycler). Throws RenderError (LimitError past `limits`). Counting against the budget is
// the caller's business: it runs this inside a BudgetScope (jinja_budget.h), which also covers
// building `vars`; limits here bound what the interpreter's own recursion and output may reach.
std::string render(const Body& body, const DictData& vars, const ChatTemplateLimits& limits);

}  // namespace astrai::jinja
