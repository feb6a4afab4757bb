#include "train/data.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::train;
namespace test = astrai::test;

namespace {

// Documents of the given lengths; token values are their global index + 1000, every mask 1
// except where `unmasked` says.
TokenizedData make_data(const std::vector<int>& doc_lengths) {
  TokenizedData d;
  for (int len : doc_lengths) {
    d.doc_starts.push_back(d.tokens.size());
    for (int i = 0; i < len; ++i) {
      d.tokens.push_back(uint32_t(1000 + d.tokens.size()));
      d.loss_mask.push_back(1);
    }
  }
  return d;
}

std::unique_ptr<Tokenizer> builtin() {
  return Tokenizer::builtin().value();
}

}  // namespace

TEST_CASE("windows: seq_len + 1 tokens from w * seq_len, positions restart per document", "[train][data]") {
  // Documents [0, 5), [5, 7), [7, 20): seq_len 4 -> windows at 0, 4, 8, 12 (4 of them: (20 - 1) / 4).
  TokenizedData d = make_data({5, 2, 13});
  d.loss_mask[9] = 0;
  auto l = WindowLoader::create(&d, 4, 2, 1, false, "data.train");
  REQUIRE(l.ok());
  CHECK(l->num_windows() == 4);
  TrainBatch b = l->make_batch();
  l->fill_row(1, b, 1);  // tokens 4..7, targets 5..8
  const std::vector<int32_t> tokens(b.tokens.begin() + 4, b.tokens.end());
  const std::vector<int32_t> targets(b.targets.begin() + 4, b.targets.end());
  const std::vector<int32_t> positions(b.positions.begin() + 4, b.positions.end());
  const std::vector<int32_t> doc_start(b.doc_start.begin() + 4, b.doc_start.end());
  CHECK(tokens == std::vector<int32_t>{1004, 1005, 1006, 1007});
  // 4 -> 5 crosses into document 2 (not predicted); 6 -> 7 crosses into document 3.
  CHECK(targets == std::vector<int32_t>{kIgnore, 1006, kIgnore, 1008});
  // Token 4 is document 1's last (its start 0 lies before the window: positions restart at it).
  CHECK(positions == std::vector<int32_t>{0, 0, 1, 0});
  CHECK(doc_start == std::vector<int32_t>{0, 1, 1, 3});

  l->fill_row(2, b, 0);  // tokens 8..11, targets 9..12; token 9 has loss mask 0
  CHECK(std::vector<int32_t>(b.targets.begin(), b.targets.begin() + 4) ==
        std::vector<int32_t>{kIgnore, 1010, 1011, 1012});
  CHECK(std::vector<int32_t>(b.positions.begin(), b.positions.begin() + 4) ==
        std::vector<int32_t>{0, 1, 2, 3});
  CHECK(std::vector<int32_t>(b.doc_start.begin(), b.doc_start.begin() + 4) ==
        std::vector<int32_t>{0, 0, 0, 0});
}

TEST_CASE("windows: too little data or no loss tokens is an error naming the split", "[train][data]") {
  TokenizedData d = make_data({4});
  auto l = WindowLoader::create(&d, 4, 1, 1, true, "data.valid");
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("data.valid: 4 tokens, fewer than seq_len + 1 = 5"));
  d = make_data({9});
  std::fill(d.loss_mask.begin(), d.loss_mask.end(), 0);
  l = WindowLoader::create(&d, 4, 1, 1, true, "data.train");
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("data.train: no token carries a loss"));
}

TEST_CASE("shuffle: each epoch is a seeded permutation; a restored cursor continues exactly",
          "[train][data]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  TokenizedData d = make_data({30, 50, 7, 120});  // 206 tokens, seq_len 8 -> 25 windows
  auto a = WindowLoader::create(&d, 8, 3, seed, true, "data.train").value();
  REQUIRE(a.num_windows() == 25);
  const auto e0 = a.epoch_order(0), e1 = a.epoch_order(1);
  CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == 25);
  CHECK(*std::min_element(e0.begin(), e0.end()) == 0);
  CHECK(*std::max_element(e0.begin(), e0.end()) == 24);
  CHECK(e0 != e1);
  auto again = WindowLoader::create(&d, 8, 3, seed, true, "data.train").value();
  CHECK(again.epoch_order(1) == e1);
  auto other = WindowLoader::create(&d, 8, 3, seed + 1, true, "data.train").value();
  CHECK(other.epoch_order(0) != e0);

  // 20 batches of 3 cross two epoch ends; save the cursor after 7, restore into a fresh loader.
  TrainBatch b = a.make_batch();
  std::vector<std::vector<int32_t>> straight;
  DataCursor saved;
  for (int i = 0; i < 20; ++i) {
    if (i == 7) saved = a.cursor();
    a.next(b);
    straight.push_back(b.tokens);
  }
  CHECK(a.cursor().epoch == 2);
  CHECK(a.cursor().index == 60 - 50);
  auto resumed = WindowLoader::create(&d, 8, 3, seed, true, "data.train").value();
  resumed.set_cursor(saved);
  for (int i = 7; i < 20; ++i) {
    resumed.next(b);
    CHECK(b.tokens == straight[size_t(i)]);
  }
  // The first epoch deals windows in e0 order: batch 0 row 0 is window e0[0].
  CHECK(straight[0][0] == int32_t(1000 + e0[0] * 8));
}

TEST_CASE("SFT: the mask covers exactly the assistant tokens (content and end tag)", "[train][data]") {
  auto tok = builtin();
  // Pieces of the ChatML rendering with whether they are assistant tokens; the byte-level
  // tokenizer has no merges, so encoding the pieces one by one gives the ids of the whole.
  const std::vector<std::pair<std::string, bool>> pieces = {
      {"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
       false},
      {"yo, caf\xc3\xa9 \xe2\x98\x95<|im_end|>\n", true},
      {"<|im_start|>user\nok?<|im_end|>\n<|im_start|>assistant\n", false},
      {"fine<|im_end|>\n", true},
  };
  std::vector<int32_t> want_ids;
  std::vector<uint8_t> want_mask;
  for (const auto& [text, assistant] : pieces) {
    for (int32_t id : tok->encode(text, false)) {
      want_ids.push_back(id);
      want_mask.push_back(assistant ? 1 : 0);
    }
  }
  const std::string messages =
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},)"
      R"({"role":"assistant","content":"yo, café ☕"},{"role":"user","content":"ok?"},)"
      R"({"role":"assistant","content":"fine"}])";
  auto c = tokenize_conversation(*tok, messages);
  REQUIRE(c.ok());
  CHECK(c->ids == want_ids);
  CHECK(c->assistant_mask == want_mask);
  const int im_end = tok->token_to_id("<|im_end|>").value();
  CHECK(std::count(c->ids.begin(), c->ids.end(), im_end) == 5);
}

TEST_CASE("SFT: a template that does not render prefixes as prefixes is an error", "[train][data]") {
  // Drops every message but the last: earlier renderings are not prefixes of the whole.
  const std::string config =
      R"({"chat_template": "{{ messages[-1]['content'] }}{% if add_generation_prompt %}>{% endif %}",)"
      R"( "eos_token": "<|im_end|>"})";
  auto tok = Tokenizer::from_json(builtin_tokenizer_json(), config).value();
  auto c =
      tokenize_conversation(*tok, R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("is not a prefix"));
}

TEST_CASE("tokenize_jsonl: text documents end in EOS, conversations are masked, errors name the line",
          "[train][data]") {
  auto tok = builtin();
  test::TempDir dir("data");
  test::write_file(dir / "t.jsonl",
                   "{\"text\":\"ab\"}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                   "{\"role\":\"assistant\",\"content\":\"r\"}]}\n{\"text\":\"c\"}\n");
  auto d = tokenize_jsonl(dir / "t.jsonl", *tok);
  REQUIRE(d.ok());
  const uint32_t eos = uint32_t(*tok->special_tokens().eos_id);
  const auto conv =
      tokenize_conversation(*tok, R"([{"role":"user","content":"q"},{"role":"assistant","content":"r"}])")
          .value();
  REQUIRE(d->doc_starts == std::vector<uint64_t>{0, 3, 3 + conv.ids.size()});
  CHECK(d->tokens[2] == eos);
  CHECK(d->tokens.back() == eos);
  CHECK(d->tokens.size() == 3 + conv.ids.size() + 2);
  CHECK(std::vector<uint8_t>(d->loss_mask.begin() + 3, d->loss_mask.begin() + 3 + long(conv.ids.size())) ==
        conv.assistant_mask);

  test::write_file(dir / "bad.jsonl", "{\"text\":\"ok\"}\n{\"prompt\":\"x\"}\n");
  auto bad = tokenize_jsonl(dir / "bad.jsonl", *tok);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("bad.jsonl line 2: needs \"text\""));
  test::write_file(dir / "bad2.jsonl", "{\"text\":\"ok\"\n");
  bad = tokenize_jsonl(dir / "bad2.jsonl", *tok);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("bad2.jsonl line 1: not valid JSON"));
  test::write_file(dir / "bad3.jsonl", "\n[1, 2]\n");
  bad = tokenize_jsonl(dir / "bad3.jsonl", *tok);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("bad3.jsonl line 2: not a JSON object"));
}

TEST_CASE("shard cache: written once, read back equal, keyed by contents and tokenizer", "[train][data]") {
  auto tok = builtin();
  test::TempDir dir("cache");
  test::write_file(dir / "t.jsonl", "{\"text\":\"hello world\"}\n{\"text\":\"again\"}\n");
  bool hit = true;
  auto first = load_or_tokenize(dir / "t.jsonl", *tok, "tokA", dir / "cache", &hit);
  REQUIRE(first.ok());
  CHECK_FALSE(hit);
  auto second = load_or_tokenize(dir / "t.jsonl", *tok, "tokA", dir / "cache", &hit);
  REQUIRE(second.ok());
  CHECK(hit);
  CHECK(second->tokens == first->tokens);
  CHECK(second->loss_mask == first->loss_mask);
  CHECK(second->doc_starts == first->doc_starts);
  (void)load_or_tokenize(dir / "t.jsonl", *tok, "tokB", dir / "cache", &hit);
  CHECK_FALSE(hit);
  test::write_file(dir / "t.jsonl", "{\"text\":\"hello world\"}\n{\"text\":\"agaiN\"}\n");
  auto changed = load_or_tokenize(dir / "t.jsonl", *tok, "tokA", dir / "cache", &hit);
  CHECK_FALSE(hit);
  CHECK(changed->tokens != first->tokens);
  // No temp files left behind, and a truncated shard is refused rather than read.
  for (const auto& e : std::filesystem::directory_iterator(dir / "cache"))
    CHECK(e.path().extension() == ".shard");
  const auto shard = std::filesystem::directory_iterator(dir / "cache")->path();
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 3);
  auto broken = read_shard(shard);
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.status().message(), Catch::Contains("not a complete astrai token shard"));
}
