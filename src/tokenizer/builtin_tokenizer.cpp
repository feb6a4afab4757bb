// The built-in byte-level tokenizer: written as real tokenizer.json / tokenizer_config.json texts
// so that `astrai init` model directories load in transformers and tokenizers as well.
#include "src/core/json_writer.h"
#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai {
namespace {

constexpr const char* kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

// ChatML, as Qwen2 writes it (without Qwen's default system prompt).
constexpr const char* kChatMl =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

void byte_level(JsonWriter& w, bool trim_offsets) {
  w.begin_object().key("type").value("ByteLevel").key("add_prefix_space").value(false);
  w.key("trim_offsets").value(trim_offsets).key("use_regex").value(true).end_object();
}

}  // namespace

std::string builtin_tokenizer_json() {
  JsonWriter w;
  w.begin_object();
  w.key("version").value("1.0").key("truncation").null().key("padding").null();
  w.key("added_tokens").begin_array();
  for (int i = 0; i < 3; ++i) {
    w.begin_object().key("id").value(256 + i).key("content").value(kSpecials[i]);
    w.key("single_word").value(false).key("lstrip").value(false).key("rstrip").value(false);
    w.key("normalized").value(false).key("special").value(true).end_object();
  }
  w.end_array();
  w.key("normalizer").null();
  w.key("pre_tokenizer");
  byte_level(w, true);
  w.key("post_processor");
  byte_level(w, false);
  w.key("decoder");
  byte_level(w, true);
  w.key("model").begin_object();
  w.key("type").value("BPE").key("dropout").null().key("unk_token").null();
  w.key("continuing_subword_prefix").null().key("end_of_word_suffix").null();
  w.key("fuse_unk").value(false).key("byte_fallback").value(false).key("ignore_merges").value(false);
  w.key("vocab").begin_object();
  const auto& alphabet = tok::byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, alphabet[size_t(b)]);
    w.key(ch).value(b);
  }
  w.end_object();
  w.key("merges").begin_array().end_array();
  w.end_object();
  w.end_object();
  return w.take();
}

std::string builtin_tokenizer_config_json() {
  JsonWriter w;
  w.begin_object();
  w.key("add_bos_token").value(false).key("add_eos_token").value(false);
  w.key("added_tokens_decoder").begin_object();
  for (int i = 0; i < 3; ++i) {
    w.key(std::to_string(256 + i)).begin_object().key("content").value(kSpecials[i]);
    w.key("lstrip").value(false).key("normalized").value(false).key("rstrip").value(false);
    w.key("single_word").value(false).key("special").value(true).end_object();
  }
  w.end_object();
  w.key("bos_token").null();
  w.key("eos_token").value("<|im_end|>");
  w.key("pad_token").value("<|endoftext|>");
  w.key("unk_token").null();
  w.key("additional_special_tokens").begin_array().value("<|im_start|>").value("<|im_end|>").end_array();
  w.key("chat_template").value(kChatMl);
  w.key("clean_up_tokenization_spaces").value(false);
  w.key("model_max_length").value(int64_t(32768));
  w.key("tokenizer_class").value("PreTrainedTokenizerFast");
  w.end_object();
  return w.take();
}

}  // namespace astrai
