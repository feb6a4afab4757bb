// tokenizer.json "decoder": ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
//
// Decoders here work on bytes, not text: ByteLevel and ByteFallback turn tokens into raw bytes
// that may be partial UTF-8, and only the caller's final step replaces invalid sequences with
// U+FFFD (maximal subparts, as the WHATWG TextDecoder and Python's errors="replace" do). That
// keeps partial characters intact for the incremental detokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"

namespace astrai::tok {

struct DecodePiece {
  std::string bytes;
  bool added = false;  // an added token: ByteLevel passes it through verbatim
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<DecodePiece>& pieces) const = 0;
};

struct ParsedDecoder {
  std::unique_ptr<Decoder> decoder;  // null: tokens are joined with " " (HF's default)
  bool pure_byte_level = false;      // exactly one ByteLevel decoder: the fast path applies
};

Result<ParsedDecoder> parse_decoder(const JsonEl& json);

}  // namespace astrai::tok
