// Broken model directories through the CLI: each gives one line on stderr naming the file (and the
// tensor, where one is at fault), a non-zero exit code, and no crash.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>

#include "model/forward_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace fs = std::filesystem;
namespace {

// Runs `astrai score` on dir and checks the failure; returns stderr.
std::string score_fails(const fs::path& dir) {
  TempDir io("io");
  write_file(io / "in.jsonl", "{\"ids\":[1,2,3]}\n");
  auto r = run_command(astrai_bin() + " score --model '" + dir.string() + "' --input '" +
                       (io / "in.jsonl").string() + "' --output '" + (io / "out.jsonl").string() + "'");
  INFO("stderr: " << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code < 128);  // an error exit, not a signal
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  return r.err;
}

void write_good(const fs::path& dir, uint64_t seed,
                const std::function<void(std::vector<TensorSpec>&)>& edit = nullptr) {
  write_random_model(dir, preset_config("tiny").value(), seed, DType::f32, edit, /*with_tokenizer=*/true);
}

}  // namespace

TEST_CASE("a model dir without config.json is an error naming config.json", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  fs::remove(dir / "config.json");
  REQUIRE_THAT(score_fails(dir.path()), Catch::Contains("config.json"));
}

TEST_CASE("a config.json that is not JSON is an error naming config.json", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  write_file(dir / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ");
  REQUIRE_THAT(score_fails(dir.path()), Catch::Contains("config.json"));
}

TEST_CASE("a model dir without model.safetensors is an error naming model.safetensors", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  fs::remove(dir / "model.safetensors");
  REQUIRE_THAT(score_fails(dir.path()), Catch::Contains("model.safetensors"));
}

TEST_CASE("a truncated model.safetensors is an error naming the file", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("bad");
  write_good(dir.path(), seed);
  const auto size = fs::file_size(dir / "model.safetensors");
  // Cut anywhere: inside the header or inside the data.
  std::mt19937_64 rng(seed);
  const auto keep = std::uniform_int_distribution<uintmax_t>(1, size - 1)(rng);
  fs::resize_file(dir / "model.safetensors", keep);
  INFO("kept " << keep << " of " << size << " bytes");
  REQUIRE_THAT(score_fails(dir.path()), Catch::Contains("model.safetensors"));
}

TEST_CASE("a tensor with the wrong shape is an error naming the tensor", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed(), [](std::vector<TensorSpec>& specs) {
    for (auto& s : specs)
      if (s.name == "model.layers.1.self_attn.k_proj.weight") s.shape[0] += 1;
  });
  const std::string err = score_fails(dir.path());
  REQUIRE_THAT(err, Catch::Contains("model.layers.1.self_attn.k_proj.weight"));
  REQUIRE_THAT(err, Catch::Contains("model.safetensors"));
}

TEST_CASE("a missing tensor is an error naming the tensor", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed(), [](std::vector<TensorSpec>& specs) {
    specs.erase(
        std::remove_if(specs.begin(), specs.end(),
                       [](const TensorSpec& s) { return s.name == "model.layers.0.mlp.down_proj.weight"; }),
        specs.end());
  });
  REQUIRE_THAT(score_fails(dir.path()), Catch::Contains("model.layers.0.mlp.down_proj.weight"));
}

// The built-in tokenizer.json of a model dir with its first added token (id 256) given `id`.
void set_added_token_id(const fs::path& dir, const std::string& id) {
  std::string j = read_file(dir / "tokenizer.json");
  const size_t at = j.find("\"id\":256,");
  REQUIRE(at != std::string::npos);
  write_file(dir / "tokenizer.json", j.replace(at, 9, "\"id\":" + id + ","));
}

TEST_CASE("an added token with id 1,000,000,000 is refused at load naming the token", "[integration]") {
  // It used to be accepted: `score` then held a 1 GB table and exited 0.
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  set_added_token_id(dir.path(), "1000000000");
  const std::string err = score_fails(dir.path());
  REQUIRE_THAT(err,
               Catch::Contains("tokenizer.json") && Catch::Contains("'<|endoftext|>' has id 1000000000"));
}

TEST_CASE("a token id the model cannot embed is refused at load naming both files", "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  set_added_token_id(dir.path(), "320");  // the tiny preset's vocab_size is 320
  const std::string err = score_fails(dir.path());
  REQUIRE_THAT(err, Catch::Contains("tokenizer.json: token '<|endoftext|>' has id 320") &&
                        Catch::Contains("config.json vocab_size = 320"));
}

TEST_CASE("an eos_token_id the model cannot embed is refused naming generation_config.json",
          "[integration]") {
  TempDir dir("bad");
  write_good(dir.path(), fresh_seed());
  write_file(dir / "generation_config.json", "{\"eos_token_id\": [258, 5000]}");
  REQUIRE_THAT(score_fails(dir.path()),
               Catch::Contains("generation_config.json: eos_token_id 5000 is outside"));
}

TEST_CASE("a --model that is neither a directory nor a preset is an error naming it", "[integration]") {
  TempDir dir("bad");
  REQUIRE_THAT(score_fails(dir / "no-such-model"), Catch::Contains("no-such-model"));
}

}  // namespace astrai::test
