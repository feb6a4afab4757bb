// tokenizer.json (and tokenizer_config.json) loading, then encode/decode of arbitrary bytes with
// whatever loaded. Input: tokenizer.json text, a NUL byte, tokenizer_config.json text, a NUL byte,
// the text to encode. Loading may fail (with a Status); nothing may crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "src/tokenizer/chat_template.h"
#include "src/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  for (int i = 0; i < 2; ++i) {
    const size_t nul = in.find('\0');
    parts[i] = in.substr(0, nul);
    in = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  }
  parts[2] = in;
  auto tok = astrai::Tokenizer::from_json(parts[0], parts[1]);
  if (!tok.ok()) return 0;
  const astrai::Tokenizer& t = **tok;
  std::vector<int32_t> ids = t.encode(parts[2]);
  (void)t.decode(ids);
  (void)t.decode(ids, /*skip_special_tokens=*/true);
  // Ids straight from the input bytes, in range or not.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 4 <= parts[2].size() && raw.size() < 64; i += 4) {
    int32_t id = 0;
    for (int k = 0; k < 4; ++k) id = int32_t(uint32_t(id) << 8 | uint8_t(parts[2][i + k]));
    raw.push_back(id % (t.vocab_size() + 8));
  }
  (void)t.decode(raw);
  astrai::IncrementalDetokenizer detok(t);
  for (int32_t id : raw) (void)detok.push(id);
  (void)detok.finish();
  return 0;
}
