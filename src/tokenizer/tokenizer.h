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

namespace astrai {

class ChatTemplate;

struct SpecialTokens {
  std::optional<int32_t> bos_id, eos_id, pad_id;
  std::string bos_token, eos_token, pad_token;
  bool add_bos_token = false;           // tokenizer_config.json add_bos_token (or post-processor BOS)
  std::vector<int32_t> stop_ids;        // eos plus generation_config.json eos_token_id(s)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads DIR/tokenizer.json, DIR/tokenizer_config.json (optional), DIR/generation_config.json
  // (optional). An unsupported component is an error naming it.
  static Result<std::unique_ptr<Tokenizer>> load(const std::filesystem::path& dir);
  // Parses a tokenizer.json text (and optional tokenizer_config.json text).
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json = {});

  // add_special_tokens: apply the post-processor (e.g. BOS) as HF's encode() default does.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;

  virtual int32_t vocab_size() const = 0;  // including added tokens
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // "" when out of range
  virtual bool is_special(int32_t id) const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;

  // The chat template from tokenizer_config.json (nullptr when the model has none).
  virtual const ChatTemplate* chat_template() const = 0;
};

// The built-in byte-level tokenizer for presets: 256 byte tokens (GPT-2 byte-to-unicode alphabet,
// no merges), then the specials <|endoftext|>, <|im_start|>, <|im_end|>, and a ChatML template.
// Returned as the text of tokenizer.json / tokenizer_config.json so `astrai init` writes real files
// that transformers can load as well.
std::string builtin_tokenizer_json();
std::string builtin_tokenizer_config_json();

// Streaming detokenizer: feed ids one at a time, get text that is always complete UTF-8.
// Bytes of a partial character are held back until it completes (or are flushed as U+FFFD by
// finish() if the sequence ends broken). O(1) amortised per token.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true);
  // Appends the text that became final after this token (possibly empty).
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  // recent ids needed to decode the next piece
  size_t prefix_offset_ = 0, read_offset_ = 0;
  std::string pending_;
};

}  // namespace astrai
