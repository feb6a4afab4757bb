#include "train/checkpoint.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <random>

#include "src/model/model_init.h"
#include "src/model/weights.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::train;
namespace test = astrai::test;
namespace fs = std::filesystem;

namespace {

fs::path tiny_model(const fs::path& dir, uint64_t seed) {
  ModelConfig c = preset_config("tiny").value();
  InitOptions o;
  o.seed = seed;
  o.torch_dtype = "float32";
  fs::create_directories(dir);
  check(write_random_model(c, dir, o));
  return dir;
}

std::string score(const fs::path& model, const fs::path& work) {
  test::write_file(work / "in.jsonl", "{\"text\":\"The checkpoint must score as its source does.\"}\n");
  auto r =
      test::run_command(test::astrai_bin() + " score --model '" + model.string() + "' --input '" +
                        (work / "in.jsonl").string() + "' --output '" + (work / "out.jsonl").string() + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return test::read_file(work / "out.jsonl");
}

}  // namespace

TEST_CASE("checkpoint: an HF model directory plus trainer state, loadable by the serving loader",
          "[train][checkpoint]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir tmp("ckpt");
  const fs::path src = tiny_model(tmp / "src", seed);
  auto store = WeightStore::open(src).value();
  const ModelConfig config = ModelConfig::load(src).value();

  CheckpointContents c;
  c.config = config;
  c.tokenizer_dir = src;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<std::vector<float>> moments;
  for (const auto& [name, shape] : weight_shapes(config)) {
    const SafeTensor* t = store.find(name);
    REQUIRE(t);
    REQUIRE(t->dtype == DType::f32);
    c.weights.push_back({name, DType::f32, shape, t->data});
    for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
      moments.emplace_back(size_t(t->numel()));
      for (float& x : moments.back()) x = float(rng()) / 4e9f;
      c.moments.push_back({kind + name, DType::f32, shape, nullptr});
    }
  }
  for (size_t i = 0; i < c.moments.size(); ++i) c.moments[i].data = moments[i].data();
  c.state.step = 12;
  c.state.cursor = {3, 17};
  c.state.seed = seed;
  c.state.adam_t = 12;
  c.state.config_json = R"({"steps":20})";

  auto dir = write_checkpoint(tmp / "out", c);
  REQUIRE(dir.ok());
  CHECK(*dir == tmp / "out" / "step_000012");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "trainer_state.json", "optimizer.safetensors"})
    CHECK(fs::exists(*dir / f));
  // Nothing else under out: the temp directory was renamed.
  CHECK(std::distance(fs::directory_iterator(tmp / "out"), fs::directory_iterator()) == 1);

  auto state = read_trainer_state(*dir);
  REQUIRE(state.ok());
  CHECK(state->step == 12);
  CHECK(state->cursor == DataCursor{3, 17});
  CHECK(state->seed == seed);
  CHECK(state->adam_t == 12);
  CHECK(state->config_json == R"({"steps":20})");

  auto opt = SafeTensorsFile::open(*dir / "optimizer.safetensors").value();
  for (size_t i = 0; i < c.moments.size(); ++i) {
    const SafeTensor* t = opt.find(c.moments[i].name);
    REQUIRE(t);
    CHECK(std::memcmp(t->data, moments[i].data(), t->nbytes) == 0);
  }
  auto written = WeightStore::open(*dir).value();
  for (const auto& w : c.weights) {
    const SafeTensor* t = written.find(w.name);
    REQUIRE(t);
    CHECK(t->shape == w.shape);
    CHECK(std::memcmp(t->data, w.data, t->nbytes) == 0);
  }
  // The serving loader takes it as a model directory and computes what the source computes.
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  CHECK(score(*dir, tmp / "a") == score(src, tmp / "b"));

  // Saving the same step again replaces it whole.
  c.state.cursor = {4, 0};
  REQUIRE(write_checkpoint(tmp / "out", c).ok());
  CHECK(read_trainer_state(*dir)->cursor == DataCursor{4, 0});
}

TEST_CASE("checkpoint: --resume takes the highest complete step", "[train][checkpoint]") {
  test::TempDir tmp("latest");
  CHECK_FALSE(latest_checkpoint(tmp / "missing"));
  for (const char* d : {"step_000002", "step_000010", "step_000100", ".step_000200.tmp-1", "step_x"})
    fs::create_directories(tmp / d);
  test::write_file(tmp / "step_000002" / "trainer_state.json", "{}");
  test::write_file(tmp / "step_000010" / "trainer_state.json", "{}");
  test::write_file(tmp / ".step_000200.tmp-1" / "trainer_state.json", "{}");
  // step_000100 has no trainer_state.json: not complete.
  CHECK(latest_checkpoint(tmp.path()) == tmp / "step_000010");
  CHECK(checkpoint_name(7) == "step_000007");
  CHECK(checkpoint_name(1234567) == "step_1234567");
  auto bad = read_trainer_state(tmp / "step_000002");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("malformed trainer state"));
}
