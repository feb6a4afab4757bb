// The Tokenizer implementation for Hugging Face tokenizer.json files: added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor and decoder, wired as HF's TokenizerImpl does.
//
// Where HF's implementations disagree we follow the Rust `tokenizers` crate (what transformers
// runs), and the tests compare with the JS port only where the two agree:
//  - (?i) in split regexes folds case over Unicode as Oniguruma does ('ſ matches 's); the JS port
//    folds ASCII only.
//  - Split's MergedWithPrevious / MergedWithNext / Contiguous and Metaspace's `split` are applied
//    (the JS port treats them as Isolated / no split).
//  - Invalid UTF-8, in input text or in decoded bytes, becomes U+FFFD per maximal invalid subpart
//    (Python's errors="replace", Rust's from_utf8_lossy, WHATWG TextDecoder). Rust's ByteFallback
//    decoder instead writes one U+FFFD per byte of an invalid <0x..> run; we use the former.
//  - decode() never applies transformers' clean_up_tokenization_spaces (a transformers-level
//    option, and it breaks decode(encode(s)) == s).
//  - encode() applies tokenizer.json's post-processor only; tokenizer_config.json's add_bos_token
//    is reported in special_tokens() for callers that build prompts themselves.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/added_vocabulary.h"
#include "src/tokenizer/bpe_model.h"
#include "src/tokenizer/chat_template.h"
#include "src/tokenizer/decoder.h"
#include "src/tokenizer/normalizer.h"
#include "src/tokenizer/post_processor.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::tok {

class HfTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<HfTokenizer>> create(std::string_view tokenizer_json,
                                                     std::string_view tokenizer_config_json,
                                                     std::string_view generation_config_json,
                                                     const ChatTemplateLimits& template_limits = {},
                                                     const ChatTemplateSources& templates = {});

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override { return flag(id) & kSpecial; }
  const SpecialTokens& special_tokens() const override { return special_; }
  const ChatTemplate* chat_template() const override { return chat_template_.get(); }
  const ChatTemplate* tool_use_template() const override { return tool_use_template_.get(); }
  Status chat_template_status() const override { return chat_template_status_; }

 private:
  static constexpr uint8_t kAdded = 1, kSpecial = 2;
  uint8_t flag(int32_t id) const { return id >= 0 && size_t(id) < flags_.size() ? flags_[size_t(id)] : 0; }
  void encode_text(std::string_view text, bool first_section, std::vector<int32_t>& ids) const;
  Status load_config(std::string_view config_json, std::string_view generation_json,
                     const ChatTemplateLimits& template_limits, const ChatTemplateSources& templates);

  std::unique_ptr<Normalizer> normalizer_;
  ParsedPreTokenizer pre_;
  std::unique_ptr<BpeModel> model_;
  PostProcessor post_;
  ParsedDecoder decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::unordered_map<int32_t, std::string> added_by_id_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::vector<uint8_t> flags_;  // by id: kAdded | kSpecial
  int32_t vocab_size_ = 0;
  SpecialTokens special_;
  std::unique_ptr<ChatTemplate> chat_template_, tool_use_template_;
  Status chat_template_status_;
};

}  // namespace astrai::tok
