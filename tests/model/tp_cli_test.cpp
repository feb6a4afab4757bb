// `astrai generate --tp N` end to end on the CPU (N in-process ranks): the same greedy completions as
// --tp 1 on a random model with the built-in tokenizer, and a clear error for a rank count the
// model's heads do not divide.
#include <catch2/catch.hpp>
#include <random>

#include "model/forward_util.h"
#include "tools/test_util.h"

namespace astrai::test {

TEST_CASE("astrai generate --tp 2 writes the --tp 1 greedy completions", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("tpcli");
  ModelConfig cfg = preset_config("tiny").value();
  cfg.tie_word_embeddings = false;
  write_random_model(dir / "model", cfg, seed, DType::f32, nullptr, true);
  std::string input;
  for (int i = 0; i < 4; ++i) {
    std::string ids;
    for (int32_t t : random_ids(rng, std::uniform_int_distribution<int64_t>(3, 40)(rng), 256))
      ids += (ids.empty() ? "" : ",") + std::to_string(t);
    input += "{\"id\": " + std::to_string(i) + ", \"prompt_ids\": [" + ids + "]}\n";
  }
  write_file(dir / "in.jsonl", input);
  auto generate = [&](int tp) {
    const std::string out = (dir / ("out" + std::to_string(tp) + ".jsonl")).string();
    CommandResult r = run_command(
        astrai_bin() + " generate --device cpu --model '" + (dir / "model").string() + "' --input '" +
        (dir / "in.jsonl").string() + "' --output '" + out +
        "' --temperature 0 --max-tokens 24 --ignore-eos --no-progress --tp " + std::to_string(tp));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return read_file(out);
  };
  const std::string one = generate(1);
  CHECK_THAT(one, Catch::Contains("\"token_ids\""));
  CHECK(generate(2) == one);
}

TEST_CASE("astrai generate --tp with a rank count the heads do not divide fails naming the size",
          "[integration]") {
  TempDir dir("tpclibad");
  write_random_model(dir / "model", preset_config("tiny").value(), 1, DType::f32, nullptr, true);
  write_file(dir / "in.jsonl", "{\"prompt\": \"hi\"}\n");
  CommandResult r = run_command(astrai_bin() + " generate --device cpu --model '" + (dir / "model").string() +
                                "' --input '" + (dir / "in.jsonl").string() + "' --output '" +
                                (dir / "out.jsonl").string() + "' --no-progress --tp 3");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("attention heads (4) is not divisible by 3"));
}

}  // namespace astrai::test
