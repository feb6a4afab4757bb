// Tokenizer: Hugging Face tokenizer.json (BPE) + tokenizer_config.json, or the built-in
// byte-level tokenizer used by presets. Encodes and decodes exactly as HF `tokenizers` does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/chat_template_limits.h"

namespace astrai {

class ChatTemplate;

// Token ids above this are refused when a tokenizer is loaded: 16 times the largest vocabulary in
// use (Gemma 3: 262,144), and small enough that the per-id tables of a hostile file stay small.
constexpr int32_t kMaxTokenId = (1 << 22) - 1;

struct SpecialTokens {
  std::optional<int32_t> bos_id, eos_id, pad_id;
  std::string bos_token, eos_token, pad_token;
  bool add_bos_token = false;     // tokenizer_config.json add_bos_token (or post-processor BOS)
  std::vector<int32_t> stop_ids;  // eos plus generation_config.json eos_token_id(s)
};

// A chat template from elsewhere than tokenizer_config.json: the model directory's
// chat_template.jinja, or one the user names (`--chat-template`). `where` names it in errors.
struct ChatTemplateText {
  std::string source;
  std::string where;
};

// Templates that replace tokenizer_config.json's: the default one, and the one transformers renders
// requests with tools through where a model names its templates ("tool_use").
struct ChatTemplateSources {
  std::optional<ChatTemplateText> main, tool_use;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads DIR/tokenizer.json, DIR/tokenizer_config.json (optional), DIR/generation_config.json
  // (optional). An unsupported component is an error naming it. When DIR/config.json gives the
  // model's vocab_size, every id the tokenizer can produce or stop on must be below it
  // (check_fits_vocab): that is where the tokenizer and the model meet, for every command.
  // `template_limits` bound the chat template's parse and renders (serve's template_* settings).
  // The chat template: `chat_template` when given (for requests with tools too), else
  // DIR/chat_template.jinja when present (as transformers saves it since 4.5x, and prefers it), else
  // tokenizer_config.json's; with tools, DIR/additional_chat_templates/tool_use.jinja or
  // tokenizer_config.json's template named tool_use, where there is one.
  static Result<std::unique_ptr<Tokenizer>> load(const std::filesystem::path& dir,
                                                 const ChatTemplateLimits& template_limits = {},
                                                 const std::optional<ChatTemplateText>& chat_template = {});
  // Parses a tokenizer.json text (and optional tokenizer_config.json text).
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json = {});
  // As from_json, plus a generation_config.json text whose eos_token_id(s) join stop_ids.
  // templates: in place of tokenizer_config.json's, where given.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json,
                                                      std::string_view generation_config_json,
                                                      const ChatTemplateLimits& template_limits = {},
                                                      const ChatTemplateSources& templates = {});
  // The built-in byte-level tokenizer (builtin_tokenizer_json / builtin_tokenizer_config_json).
  static Result<std::unique_ptr<Tokenizer>> builtin();
  // `--model ARG` as the CLI takes it: an existing directory is loaded; otherwise one of `presets`
  // (the model layer's preset_names(): every preset uses the built-in tokenizer) gives the built-in
  // tokenizer; anything else is not_found.
  static Result<std::unique_ptr<Tokenizer>> load_or_preset(const std::string& model,
                                                           const std::vector<std::string>& presets);

  // add_special_tokens: apply the post-processor (e.g. BOS) as HF's encode() default does.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  // The bytes the decoder chain produces before the final UTF-8 check: decode() is these bytes with
  // invalid sequences replaced by U+FFFD. The incremental detokenizer works on them.
  virtual std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const {
    return decode(ids, skip_special_tokens);
  }

  virtual int32_t vocab_size() const = 0;  // including added tokens
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // "" when out of range
  virtual bool is_special(int32_t id) const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;

  // The chat template from tokenizer_config.json (nullptr when the model has none).
  virtual const ChatTemplate* chat_template() const = 0;
  // The template named "tool_use", where the model names its templates (nullptr otherwise).
  virtual const ChatTemplate* tool_use_template() const { return nullptr; }
  // The template a request renders with: with tools, the tool_use one where there is one (as
  // transformers picks it), else chat_template(); or why there is none (chat_template_status(), or
  // not_found when the model has no template).
  Result<const ChatTemplate*> template_for(bool with_tools) const;
  // Why chat_template() is null although tokenizer_config.json has a template (ok otherwise):
  // a template that fails to parse leaves the tokenizer usable and is reported when used.
  virtual Status chat_template_status() const { return Status::ok_status(); }
};

// Every id `tok` can produce (vocabulary, added tokens, post-processor specials: the tokenizer
// checks those against its own vocabulary at load) and every stop id must index an embedding table
// of `vocab_size` rows. The error names the file, the token and its id, and `vocab_where` (e.g.
// "DIR/config.json vocab_size"). `tokenizer_dir`: the directory the tokenizer files came from.
Status check_fits_vocab(const Tokenizer& tok, int64_t vocab_size, const std::string& tokenizer_dir,
                        const std::string& vocab_where);

// Text as HF tokenizers receives it: Python passes `str`, so bytes that are not valid UTF-8 become
// U+FFFD on the way in (one per maximal invalid subpart, as Python's errors="replace" and
// WHATWG's TextDecoder do). encode() applies this to its input.
std::string utf8_sanitize(std::string_view bytes);

// The built-in byte-level tokenizer for presets: 256 byte tokens (GPT-2 byte-to-unicode alphabet,
// no merges), then the specials <|endoftext|>, <|im_start|>, <|im_end|>, and a ChatML template.
// Returned as the text of tokenizer.json / tokenizer_config.json so `astrai init` writes real files
// that transformers can load as well.
std::string builtin_tokenizer_json();
std::string builtin_tokenizer_config_json();

// Streaming detokenizer: feed ids one at a time, get text that is always complete UTF-8.
// Bytes of a partial character are held back until it completes (or are flushed as U+FFFD by
// finish() if the sequence ends broken). O(1) amortised per token: each push decodes only the
// previous id and the new one (the decoders' output for a token depends at most on whether it is
// the first), and takes the difference in bytes.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true);
  // Appends the text that became final after this token (possibly empty).
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  // the previous kept id (context) and the new one
  size_t prev_bytes_ = 0;        // decode_bytes of the previous id alone (as a non-first token)
  std::string pending_;          // decoded bytes not yet emitted: an incomplete UTF-8 tail
};

}  // namespace astrai
