// Tokenizer::load / from_json / builtin / load_or_preset, and the check that a tokenizer fits the
// model it is loaded with.
#include <simdjson.h>

#include "src/core/file_text.h"
#include "src/tokenizer/chat_template_config.h"
#include "src/tokenizer/hf_tokenizer.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {
namespace {

// Prefixes a Status message with the file it is about, unless it names one already.
Status in_file(const Status& s, const std::filesystem::path& p) {
  return Status(s.code(), p.parent_path().string() + "/" + s.message());
}

// The model's vocab_size from DIR/config.json (top level, or text_config for multimodal
// checkpoints). None when the file is absent or unreadable: the model loader reports that itself.
std::optional<int64_t> model_vocab_size(const std::string& config_json) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(config_json);
  simdjson::dom::element doc;
  if (parser.parse(padded).get(doc) != simdjson::SUCCESS) return std::nullopt;
  int64_t v = 0;
  if (doc["vocab_size"].get_int64().get(v) == simdjson::SUCCESS) return v;
  if (doc["text_config"]["vocab_size"].get_int64().get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}

}  // namespace

Status check_fits_vocab(const Tokenizer& tok, int64_t vocab_size, const std::string& tokenizer_dir,
                        const std::string& vocab_where) {
  const std::string limit =
      " is outside the model's vocabulary (" + vocab_where + " = " + std::to_string(vocab_size) + ")";
  if (tok.vocab_size() > vocab_size) {
    // Name the highest id that has a token: that is the entry to fix.
    int32_t id = tok.vocab_size() - 1;
    while (id >= vocab_size && tok.id_to_token(id).empty()) --id;
    if (id >= vocab_size)
      return invalid_argument(tokenizer_dir + "/tokenizer.json: token '" + tok.id_to_token(id) + "' has id " +
                              std::to_string(id) + ", which" + limit);
  }
  const SpecialTokens& sp = tok.special_tokens();
  for (int32_t id : sp.stop_ids)
    if (id < 0 || id >= vocab_size)
      return invalid_argument(tokenizer_dir + "/generation_config.json: eos_token_id " + std::to_string(id) +
                              limit);
  return Status::ok_status();
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json,
                                                        std::string_view generation_config_json,
                                                        const ChatTemplateLimits& template_limits,
                                                        const ChatTemplateSources& templates) {
  ASTRAI_ASSIGN_OR_RETURN(
      auto t, tok::HfTokenizer::create(tokenizer_json, tokenizer_config_json, generation_config_json,
                                       template_limits, templates));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json) {
  return from_json(tokenizer_json, tokenizer_config_json, {});
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::filesystem::path& dir,
                                                   const ChatTemplateLimits& template_limits,
                                                   const std::optional<ChatTemplateText>& chat_template) {
  const auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj))
    return not_found(tj.string() + ": not found (the model directory needs a tokenizer.json)");
  ASTRAI_ASSIGN_OR_RETURN(std::string tokenizer_json, read_text_file(tj));
  std::string config, generation;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    ASTRAI_ASSIGN_OR_RETURN(config, read_text_file(dir / "tokenizer_config.json"));
  }
  if (std::filesystem::exists(dir / "generation_config.json")) {
    ASTRAI_ASSIGN_OR_RETURN(generation, read_text_file(dir / "generation_config.json"));
  }
  ChatTemplateSources templates;
  if (chat_template) {
    templates.main = templates.tool_use = chat_template;  // the user's renders every request
  } else {
    ASTRAI_ASSIGN_OR_RETURN(templates, chat_template_files(dir));
  }
  auto t = from_json(tokenizer_json, config, generation, template_limits, templates);
  if (!t.ok()) return in_file(t.status(), tj);
  const auto model_config = dir / "config.json";
  if (std::filesystem::exists(model_config)) {
    ASTRAI_ASSIGN_OR_RETURN(std::string text, read_text_file(model_config));
    if (auto vocab = model_vocab_size(text))
      ASTRAI_RETURN_IF_ERROR(
          check_fits_vocab(**t, *vocab, dir.string(), model_config.string() + " vocab_size"));
  }
  return t;
}

Result<const ChatTemplate*> Tokenizer::template_for(bool with_tools) const {
  if (with_tools && tool_use_template()) return tool_use_template();
  if (const ChatTemplate* t = chat_template()) return t;
  const Status why = chat_template_status();
  if (!why.ok()) return why;
  return not_found(
      "the model has no chat template (chat_template.jinja, or tokenizer_config.json's chat_template)");
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::builtin() {
  return from_json(builtin_tokenizer_json(), builtin_tokenizer_config_json());
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_or_preset(const std::string& model,
                                                             const std::vector<std::string>& presets) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return load(model);
  std::string names;
  for (const std::string& preset : presets) {
    if (model == preset) return builtin();
    names += (names.empty() ? "" : ", ") + preset;
  }
  return not_found("--model " + model + ": not a directory and not a preset name (" + names + ")");
}

}  // namespace astrai
