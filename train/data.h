// Training data: JSONL -> token ids + loss masks, cached as one binary shard per input file, cut
// into fixed-length windows that a seeded shuffle deals out as micro-batches.
//
// Line formats (one JSON object per line; blank lines are skipped):
//   {"text": "..."}                     pretraining: encode(text) (with the tokenizer's BOS when its
//                                       post-processor adds one) + EOS; a loss on every token
//   {"messages": [{"role", "content"}]} SFT: the model's chat template renders the conversation; a
//                                       loss only on the tokens of assistant turns
// Documents are packed back to back. A window is seq_len + 1 consecutive tokens of that stream
// (window w starts at token w * seq_len): inputs are its first seq_len tokens, targets the last
// seq_len. Positions restart at every document start (and at the window start for a document that
// began in an earlier window); doc_start keeps attention inside a document; a target that starts a
// new document is not predicted (kIgnore), nor is one whose loss mask is 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/tokenizer.h"
#include "train/train_model.h"

namespace astrai::train {

// One tokenized JSONL file.
struct TokenizedData {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> loss_mask;    // per token: 1 when a loss is taken where it is the target
  std::vector<uint64_t> doc_starts;  // first token of each document, ascending, doc_starts[0] == 0
  int64_t num_loss_tokens() const;
};

// One conversation through the chat template: ids of the whole rendering and a mask that is 1
// exactly on the tokens of assistant turns.
//
// How the assistant spans are found (what transformers' return_assistant_tokens_mask gives for
// templates with {% generation %} blocks, without needing them): for assistant message i,
//   begin_i = len(render(messages[:i], add_generation_prompt=true))   (the turn header is prompt)
//   end_i   = len(render(messages[:i+1]))                              (its content and end tag)
// both renderings must be prefixes of render(messages) (a template that rewrites earlier turns,
// e.g. one that drops past reasoning, is an error). The byte span [begin_i, end_i) of the text
// maps to tokens through each token's decoded bytes (decode of the pair (previous, token) minus
// decode of previous, as the incremental detokenizer does); a token overlapping a span is an
// assistant token. The decoded bytes must add up to the text (true of byte-level BPE tokenizers,
// the built-in one, Llama 3 and Qwen); otherwise it is an error.
struct Conversation {
  std::vector<int32_t> ids;
  std::vector<uint8_t> assistant_mask;
};
Result<Conversation> tokenize_conversation(const Tokenizer& tok, std::string_view messages_json);

// Tokenizes every line of a JSONL file (see the formats above). Errors name the file and line.
Result<TokenizedData> tokenize_jsonl(const std::filesystem::path& file, const Tokenizer& tok);

// A fingerprint of a model directory's tokenizer files (tokenizer.json, tokenizer_config.json,
// chat_template.jinja): a shard made with another tokenizer is never reused.
std::string tokenizer_fingerprint(const std::filesystem::path& model_dir);

// tokenize_jsonl through a cache: cache_dir/<file stem>-<key>.shard, key = hash of the input's
// size, mtime and contents and of tokenizer_key. A shard is written to a temp file and renamed, so
// a crash never leaves a partial one. `cache_hit` (optional) tells whether it was read back.
Result<TokenizedData> load_or_tokenize(const std::filesystem::path& file, const Tokenizer& tok,
                                       const std::string& tokenizer_key,
                                       const std::filesystem::path& cache_dir, bool* cache_hit = nullptr);

// Shard file I/O (little-endian): "ASTRAISH" u32 version u32 0, u64 tokens, u64 docs,
// u32 tokens[], u8 mask[] (padded to 8 bytes), u64 doc_starts[].
Status write_shard(const std::filesystem::path& file, const TokenizedData& data);
Result<TokenizedData> read_shard(const std::filesystem::path& file);

// Where the trainer keeps shards: $ASTRAI_CACHE_DIR/data, else $XDG_CACHE_HOME/astrai/data, else
// ~/.cache/astrai/data (beside the preset cache).
std::filesystem::path data_cache_dir();

// Where the next window comes from: position `index` of epoch `epoch`'s shuffled order.
struct DataCursor {
  uint64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const DataCursor&) const = default;
};

// Windows of one tokenized file, dealt out in batches.
class WindowLoader {
 public:
  // shuffle: each epoch's order is a permutation seeded by (seed, epoch); else in file order.
  // Fewer than seq_len + 1 tokens is an error naming `what` (e.g. "data.train").
  static Result<WindowLoader> create(const TokenizedData* data, int64_t seq_len, int64_t batch_size,
                                     uint64_t seed, bool shuffle, const std::string& what);

  int64_t num_windows() const { return num_windows_; }
  // Fills row `row` of `batch` (sized batch_size x seq_len) from window w.
  void fill_row(int64_t w, TrainBatch& batch, int row) const;
  // An empty row: token 0, every target ignored (pads the last evaluation batch).
  void fill_empty_row(TrainBatch& batch, int row) const;
  TrainBatch make_batch() const;

  // The next batch_size windows in order, across epoch ends; advances the cursor.
  void next(TrainBatch& batch);
  const DataCursor& cursor() const { return cursor_; }
  void set_cursor(const DataCursor& c);

  // Window indices of epoch `epoch` in dealing order.
  std::vector<int64_t> epoch_order(uint64_t epoch) const;

 private:
  const TokenizedData* data_ = nullptr;
  int64_t seq_len_ = 0, batch_size_ = 0, num_windows_ = 0;
  uint64_t seed_ = 0;
  bool shuffle_ = false;
  DataCursor cursor_;
  std::vector<int64_t> order_;  // of cursor_.epoch
};

}  // namespace astrai::train
