// Chat templates: a Jinja subset interpreter that renders Hugging Face `chat_template` strings the
// way transformers does (sandboxed jinja2, trim_blocks + lstrip_blocks, loopcontrols, tojson without
// ASCII escaping, raise_exception, strftime_now). See jinja_*.h for the pieces.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "src/core/status.h"
#include "src/tokenizer/chat_template_limits.h"

namespace astrai {

struct ChatTemplateInput {
  std::string messages_json = "[]";  // JSON array of message objects, passed through as-is
  std::string tools_json;            // JSON array or empty (then `tools` is None, as transformers passes it)
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  std::string extra_context_json;  // optional JSON object of extra variables
};

class ChatTemplate {
 public:
  // Parses the template; an unsupported construct is an error naming it and its position. `limits`
  // bound the parse and every render of this template (see chat_template_limits.h).
  static Result<std::unique_ptr<ChatTemplate>> parse(std::string_view source,
                                                     const ChatTemplateLimits& limits = {});
  virtual ~ChatTemplate() = default;
  // Renders; a raise_exception() in the template becomes an error with the template's message, a
  // template over its limits a resource_exhausted error naming the limit.
  virtual Result<std::string> render(const ChatTemplateInput& input) const = 0;
  virtual const ChatTemplateLimits& limits() const = 0;
};

}  // namespace astrai
