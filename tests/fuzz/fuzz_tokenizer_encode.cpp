// Encode/decode of arbitrary bytes with fixed tokenizers (the built-in byte-level one and a small
// Metaspace/NFKC/byte-fallback one), checking what must always hold: decode(encode(text)) is the
// text as Hugging Face receives it (invalid UTF-8 replaced) for the byte-level tokenizer, and the
// incremental detokenizer produces exactly what decode() does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/tokenizer/tokenizer.h"

namespace {

const astrai::Tokenizer& builtin() {
  static const auto t = astrai::Tokenizer::builtin().value();
  return *t;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const astrai::Tokenizer& t = builtin();
  const std::vector<int32_t> ids = t.encode(text, /*add_special_tokens=*/false);
  const std::string back = t.decode(ids);
  check(back == astrai::utf8_sanitize(text));
  astrai::IncrementalDetokenizer detok(t, /*skip_special_tokens=*/false);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.finish();
  check(streamed == back);
  return 0;
}
