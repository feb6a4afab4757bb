// Finds a model directory's chat template the way transformers does: DIR/chat_template.jinja when
// present, else tokenizer_config.json's "chat_template" (a string, or a list of {name, template}
// where "default" is used), with bos_token/eos_token as strings or {"content": ...} objects.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "src/core/status.h"
#include "src/tokenizer/chat_template.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

struct LoadedChatTemplate {
  std::string source;  // the template text
  std::string bos_token, eos_token;
  std::unique_ptr<ChatTemplate> tmpl;      // parsed
  std::unique_ptr<ChatTemplate> tool_use;  // the template named tool_use, for requests with tools (or null)
};

// DIR/chat_template.jinja (main) and DIR/additional_chat_templates/tool_use.jinja (tool_use), where
// present: transformers saves templates there (since 4.5x) and prefers them to tokenizer_config.json's.
// Tokenizer::load and load_chat_template both take them from here.
Result<ChatTemplateSources> chat_template_files(const std::filesystem::path& dir);

// tokenizer_config.json's "chat_template" (the text of the file; `where` names it): a string (main),
// or a list of {name, template}: main is the one named "default", else the first, and tool_use the
// one named "tool_use". The tokenizer and `astrai template` both read it here.
Result<ChatTemplateSources> config_chat_templates(std::string_view config_json, const std::string& where);

// The files' templates, each one they lack taken from the config's: the files win, each for its
// name, as transformers picks them (Tokenizer::load and load_chat_template both choose here).
ChatTemplateSources files_over_config(ChatTemplateSources files, ChatTemplateSources config);

// `limits` bound the parse and every render of the template.
Result<LoadedChatTemplate> load_chat_template(const std::filesystem::path& dir,
                                              const ChatTemplateLimits& limits = {});
// From the text of a tokenizer_config.json; `where` names it in error messages.
Result<LoadedChatTemplate> chat_template_from_config(std::string_view config_json, const std::string& where,
                                                     const ChatTemplateLimits& limits = {});

}  // namespace astrai
