// Chat template parse + render under a budget. Input: the template, then optionally a NUL byte and
// the messages JSON. Any template parses or fails with a Status, and renders or fails with one,
// within its limits (tighter here than the defaults so that each run stays fast); nothing may
// crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "src/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view source = in, messages = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
  if (const size_t nul = in.find('\0'); nul != std::string_view::npos) {
    source = in.substr(0, nul);
    messages = in.substr(nul + 1);
  }
  astrai::ChatTemplateLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_memory_bytes = 16 << 20;
  auto t = astrai::ChatTemplate::parse(source, limits);
  if (!t.ok()) return 0;
  astrai::ChatTemplateInput input;
  input.messages_json = std::string(messages);
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  input.add_generation_prompt = size % 2 == 0;
  (void)(*t)->render(input);
  return 0;
}
