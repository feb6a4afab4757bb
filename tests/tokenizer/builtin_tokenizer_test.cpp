// The built-in byte-level tokenizer: Hugging Face loads our tokenizer.json and agrees on ids,
// bytes map to ids 0..255, the specials have their fixed ids, and text round-trips.
#include <catch2/catch.hpp>
#include <random>

#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"
#include "tokenizer/corpus.h"
#include "tokenizer/hf_reference.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {
std::unique_ptr<Tokenizer> builtin() {
  return Tokenizer::builtin().value();
}
}  // namespace

TEST_CASE("Hugging Face loads the built-in tokenizer.json and encodes and decodes as we do", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("builtin");
  write_file(dir / "tokenizer.json", builtin_tokenizer_json());
  write_file(dir / "tokenizer_config.json", builtin_tokenizer_config_json());
  const auto tok = builtin();
  const auto corpus = make_corpus(seed, 500, {"<|im_start|>", "<|im_end|>", "<|endoftext|>"});
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> id_seqs(100);
  for (auto& ids : id_seqs)
    for (size_t i = 0, n = 1 + rng() % 16; i < n; ++i) ids.push_back(int32_t(rng() % 259));
  std::vector<std::string> lines;
  for (const auto& s : corpus) lines.push_back(text_line(s));
  for (size_t i = 0; i < id_seqs.size(); ++i) lines.push_back(ids_line(id_seqs[i], i % 2 == 1));
  const auto ref = hf_reference(dir.path(), lines);
  for (size_t i = 0; i < corpus.size(); ++i) {
    INFO("text " << show(corpus[i]));
    REQUIRE(tok->encode(corpus[i]) == parse_ids(ref[i]));
    REQUIRE(tok->decode(tok->encode(corpus[i])) == corpus[i]);
  }
  for (size_t i = 0; i < id_seqs.size(); ++i) {
    INFO("ids " << show(id_seqs[i]));
    REQUIRE(tok->decode(id_seqs[i], i % 2 == 1) == parse_text(ref[corpus.size() + i]));
  }
}

TEST_CASE("built-in tokenizer maps each byte to its own id and specials to 256..258", "[unit]") {
  const auto tok = builtin();
  CHECK(tok->vocab_size() == 259);
  // Raw bytes that are not UTF-8 are replaced on the way in, so feed valid text byte by byte.
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 \n\t~";
  std::vector<int32_t> want;
  for (unsigned char c : text) want.push_back(int32_t(c));
  CHECK(tok->encode(text) == want);
  CHECK(tok->encode("<|endoftext|><|im_start|>x<|im_end|>") == std::vector<int32_t>{256, 257, 'x', 258});
  CHECK(tok->token_to_id("<|im_end|>") == 258);
  CHECK(tok->is_special(257));
  CHECK_FALSE(tok->is_special(65));
  const SpecialTokens& sp = tok->special_tokens();
  CHECK(sp.eos_id == 258);
  CHECK(sp.pad_id == 256);
  CHECK_FALSE(sp.bos_id.has_value());
  CHECK_FALSE(sp.add_bos_token);
  CHECK(sp.stop_ids == std::vector<int32_t>{258});
  CHECK(tok->decode({257, 'h', 'i', 258}, true) == "hi");
  CHECK(tok->decode({257, 'h', 'i', 258}, false) == "<|im_start|>hi<|im_end|>");
}

TEST_CASE("invalid UTF-8 input is encoded as HF sees it: each bad subpart becomes U+FFFD", "[unit]") {
  const auto tok = builtin();
  // U+FFFD is EF BF BD; a truncated 3-byte sequence is one maximal subpart, a stray byte another.
  CHECK(tok->encode("a\xE4\xB8z\xFF") == std::vector<int32_t>{'a', 0xEF, 0xBF, 0xBD, 'z', 0xEF, 0xBF, 0xBD});
  CHECK(utf8_sanitize("\xF0\x9F\x98") == "\xEF\xBF\xBD");
  CHECK(utf8_sanitize("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: both bytes invalid
}

TEST_CASE("incremental detokenizer holds partial UTF-8 back and flushes a broken tail as U+FFFD", "[unit]") {
  const auto tok = builtin();
  IncrementalDetokenizer d(*tok);
  CHECK(d.push('a') == "a");
  CHECK(d.push(0xE4) == "");
  CHECK(d.push(0xB8) == "");
  CHECK(d.push(0xAD) == "\xE4\xB8\xAD");
  CHECK(d.push(257) == "");  // special, skipped by default
  CHECK(d.push(0xF0) == "");
  CHECK(d.push('b') ==
        "\xEF\xBF\xBD"
        "b");  // a lead byte followed by ASCII can never complete
  CHECK(d.push(0xE4) == "");
  CHECK(d.finish() == "\xEF\xBF\xBD");
  IncrementalDetokenizer keep(*tok, false);
  CHECK(keep.push(257) == "<|im_start|>");
}
