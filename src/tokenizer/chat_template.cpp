// Placeholder until the Jinja interpreter lands: every template is reported as unsupported.
#include "src/tokenizer/chat_template.h"

namespace astrai {

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::parse(std::string_view) {
  return unsupported("chat templates are not implemented yet");
}

}  // namespace astrai
