// Tokenizer components the npm tokenizers do not exercise, each checked against Hugging Face's JS
// tokenizers on a tokenizer.json written here: a Llama-2-style SentencePiece BPE (Prepend +
// Replace normalizer, byte_fallback, Replace/ByteFallback/Fuse/Strip decoder, BOS template), a
// Metaspace pre-tokenizer, and an NFKC byte-level tokenizer with lstrip/rstrip and normalized
// added tokens.
#include <catch2/catch.hpp>
#include <random>

#include "src/core/json_writer.h"
#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"
#include "tokenizer/corpus.h"
#include "tokenizer/hf_reference.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

const char* kMeta = "\xE2\x96\x81";  // ▁

// A SentencePiece-style BPE model: specials, 256 byte tokens, characters, and merges that build
// a few common words left to right (so no merge crosses a ▁ word start).
void sp_model(JsonWriter& w) {
  std::vector<std::string> vocab = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab.push_back(name);
  }
  vocab.push_back(kMeta);
  for (char c = 'a'; c <= 'z'; ++c) vocab.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) vocab.push_back(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) vocab.push_back(std::string(1, c));
  for (const char* p : {".", ",", "'", "!", "?", "(", ")", "\xE4\xB8\xAD", "\xC3\xA9"}) vocab.push_back(p);
  std::vector<std::pair<std::string, std::string>> merges;
  for (std::string word :
       {"_the", "_and",   "ing",  "_to",    "_of",    "er",         "_a",   "_in", "re", "on", "_is",
        "_The", "_quick", "_fox", "_model", "_token", "_tokenizer", "_dog", "th",  "_I", "ll"}) {
    if (word[0] == '_') word = kMeta + word.substr(1);
    std::string acc = word.rfind(kMeta, 0) == 0 ? kMeta : word.substr(0, 1);
    for (size_t i = acc.size(); i < word.size(); ++i) {
      const std::string next = acc + word[i];
      if (std::find(vocab.begin(), vocab.end(), next) == vocab.end()) {
        merges.emplace_back(acc, std::string(1, word[i]));
        vocab.push_back(next);
      }
      acc = next;
    }
  }
  w.begin_object().key("type").value("BPE").key("dropout").null().key("unk_token").value("<unk>");
  w.key("continuing_subword_prefix").null().key("end_of_word_suffix").null().key("fuse_unk").value(true);
  w.key("byte_fallback").value(true).key("ignore_merges").value(false).key("vocab").begin_object();
  for (size_t i = 0; i < vocab.size(); ++i) w.key(vocab[i]).value(int64_t(i));
  w.end_object().key("merges").begin_array();
  for (const auto& [a, b] : merges) w.begin_array().value(a).value(b).end_array();
  w.end_array().end_object();
}

void added(JsonWriter& w, int id, const std::string& content, bool special, bool lstrip = false,
           bool rstrip = false, bool normalized = false) {
  w.begin_object().key("id").value(id).key("content").value(content).key("single_word").value(false);
  w.key("lstrip").value(lstrip).key("rstrip").value(rstrip).key("normalized").value(normalized);
  w.key("special").value(special).end_object();
}

void sp_specials(JsonWriter& w) {
  w.key("added_tokens").begin_array();
  added(w, 0, "<unk>", true);
  added(w, 1, "<s>", true);
  added(w, 2, "</s>", true);
  w.end_array();
}

std::string llama2_style() {
  JsonWriter w;
  w.begin_object().key("version").value("1.0");
  sp_specials(w);
  w.key("normalizer")
      .raw(R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
           R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})");
  w.key("pre_tokenizer").null();
  w.key("post_processor")
      .raw(
          R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
          R"({"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}})");
  w.key("decoder").raw(
      R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
      R"({"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})");
  w.key("model");
  sp_model(w);
  w.end_object();
  return w.take();
}

std::string metaspace_style() {
  JsonWriter w;
  w.begin_object().key("version").value("1.0");
  sp_specials(w);
  w.key("normalizer").null();
  w.key("pre_tokenizer")
      .raw(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})");
  w.key("post_processor").null();
  w.key("decoder").raw(R"({"type":"Sequence","decoders":[{"type":"ByteFallback"},)"
                       R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}]})");
  w.key("model");
  sp_model(w);
  w.end_object();
  return w.take();
}

// The built-in byte-level tokenizer plus NFKC and added tokens with lstrip / rstrip / normalized.
std::string nfkc_byte_level() {
  std::string j = builtin_tokenizer_json();
  const std::string specials_end = R"("special":true}],)";
  const size_t at = j.find(specials_end);
  std::string extra;
  {
    JsonWriter w;
    w.begin_array();
    added(w, 259, "<tool>", false, true, true);
    added(w, 260, "\xEF\xBD\x98\xEF\xBD\x99", false, false, false, true);  // ｘｙ, matched as NFKC "xy"
    added(w, 261, "[END]", true, false, true);
    w.end_array();
    extra = w.str();
  }
  std::string items(1, ',');
  items.append(extra, 1, extra.size() - 2);
  j.insert(at + specials_end.size() - 2, items);
  const std::string null_norm = R"("normalizer":null)";
  j.replace(j.find(null_norm), null_norm.size(), R"("normalizer":{"type":"NFKC"})");
  return j;
}

void check_against_hf(const std::string& name, const std::string& tokenizer_json, bool nfkc) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", tokenizer " << name);
  TempDir dir("synth");
  write_file(dir / "tokenizer.json", tokenizer_json);
  write_file(dir / "tokenizer_config.json", "{}");
  auto loaded = Tokenizer::from_json(tokenizer_json);
  INFO(loaded.status().message());
  REQUIRE(loaded.ok());
  const Tokenizer& tok = **loaded;
  const auto corpus =
      make_corpus(seed, 600, {"<s>", "</s>", "<tool>", " <tool> ", "\xEF\xBD\x98\xEF\xBD\x99", "[END]"});
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> id_seqs(150);
  for (auto& ids : id_seqs)
    for (size_t i = 0, n = 1 + rng() % 16; i < n; ++i) {
      int32_t id = int32_t(rng() % uint64_t(tok.vocab_size()));
      if (rng() % 3 == 0) id = int32_t(3 + 0x80 + rng() % 0x50);  // byte-fallback continuation / lead bytes
      if (nfkc && rng() % 2) id = int32_t(0x80 + rng() % 0x60);   // raw high bytes of the byte-level vocab
      ids.push_back(id);
    }
  std::vector<std::string> lines;
  for (size_t i = 0; i < corpus.size(); ++i) lines.push_back(text_line(corpus[i], i % 4 != 0));
  for (size_t i = 0; i < id_seqs.size(); ++i) lines.push_back(ids_line(id_seqs[i], i % 2 == 0));
  const auto ref = hf_reference(dir.path(), lines);
  size_t bad = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto ids = tok.encode(corpus[i], i % 4 != 0);
    if (ids != parse_ids(ref[i]) && ++bad <= 5)
      FAIL_CHECK("encode(" << show(corpus[i]) << ")\n  astrai " << show(ids) << "\n  HF     " << ref[i]);
  }
  for (size_t i = 0; i < id_seqs.size(); ++i) {
    const std::string text = tok.decode(id_seqs[i], i % 2 == 0);
    if (text != parse_text(ref[corpus.size() + i]) && ++bad <= 10)
      FAIL_CHECK("decode(" << show(id_seqs[i]) << ")\n  astrai " << show(text) << "\n  HF     "
                           << ref[corpus.size() + i]);
    IncrementalDetokenizer d(tok, i % 2 == 0);
    std::string streamed;
    for (int32_t id : id_seqs[i]) streamed += d.push(id);
    streamed += d.finish();
    if (streamed != text && ++bad <= 10)
      FAIL_CHECK("streaming " << show(id_seqs[i]) << " gave " << show(streamed));
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("a Llama-2-style byte-fallback BPE encodes and decodes as Hugging Face does", "[unit]") {
  check_against_hf("llama2-style", llama2_style(), false);
}

TEST_CASE("a Metaspace pre-tokenizer with byte fallback encodes and decodes as Hugging Face does", "[unit]") {
  check_against_hf("metaspace", metaspace_style(), false);
}

TEST_CASE("NFKC and lstrip/rstrip/normalized added tokens behave as in Hugging Face", "[unit]") {
  check_against_hf("nfkc", nfkc_byte_level(), true);
}

TEST_CASE("the Llama-2-style template puts BOS first and reports it", "[unit]") {
  auto tok = Tokenizer::from_json(llama2_style(), R"({"bos_token":"<s>","eos_token":{"content":"</s>"}})",
                                  R"({"eos_token_id":[2,7]})")
                 .value();
  CHECK(tok->encode("the", true).front() == 1);
  CHECK(tok->encode("the", false).front() != 1);
  CHECK(tok->special_tokens().add_bos_token);
  CHECK(tok->special_tokens().bos_id == 1);
  CHECK(tok->special_tokens().eos_id == 2);
  CHECK(tok->special_tokens().stop_ids == std::vector<int32_t>{2, 7});
}
