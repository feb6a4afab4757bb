// Random init, `astrai init`, and presets as --model: deterministic weights, complete HF
// directories that our loader and the Python reference both read.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "src/core/threads.h"
#include "src/model/model_init.h"
#include "src/model/model_source.h"
#include "src/model/weights.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

namespace fs = std::filesystem;
using namespace astrai;
using astrai::test::TempDir;

namespace {

std::string st_io() {
  return (astrai::test::source_dir() / "tests/model/st_io.py").string();
}

struct Stats {
  std::string dtype;
  std::vector<int64_t> shape;
  double mean = 0, std = 0;
};

// Per-tensor dtype, shape, mean and std of a model directory, computed by tests/model/st_io.py.
std::map<std::string, Stats> python_stats(const fs::path& dir) {
  auto r = astrai::test::run_command(astrai::test::python3() + " " + st_io() + " init-dir " + dir.string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  simdjson::padded_string text(r.out);
  simdjson::dom::object root;
  REQUIRE_FALSE(parser.parse(text).get_object().get(root));
  std::map<std::string, Stats> out;
  for (auto f : root) {
    simdjson::dom::array a, shape;
    REQUIRE_FALSE(f.value.get_array().get(a));
    Stats s;
    std::string_view dt;
    REQUIRE_FALSE(a.at(0).get_string().get(dt));
    s.dtype = std::string(dt);
    REQUIRE_FALSE(a.at(1).get_array().get(shape));
    for (auto d : shape) s.shape.push_back(int64_t(d));
    REQUIRE_FALSE(a.at(2).get_double().get(s.mean));
    REQUIRE_FALSE(a.at(3).get_double().get(s.std));
    out[std::string(f.key)] = s;
  }
  return out;
}

InitOptions seeded(uint64_t seed) {
  InitOptions o;
  o.seed = seed;
  return o;
}
template <typename F>
InitOptions with(InitOptions o, F&& set) {
  set(o);
  return o;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("init writes the same bytes for the same seed and different ones for another", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed() % 100000;
  INFO("seed " << seed);
  TempDir dir("init");
  REQUIRE(init_model_dir("tiny", dir / "a", seeded(seed)).ok());
  REQUIRE(init_model_dir("tiny", dir / "b", seeded(seed)).ok());
  REQUIRE(init_model_dir("tiny", dir / "c", seeded(seed + 1)).ok());
  const std::string a = astrai::test::read_file(dir / "a" / "model.safetensors");
  CHECK(a == astrai::test::read_file(dir / "b" / "model.safetensors"));
  CHECK(a != astrai::test::read_file(dir / "c" / "model.safetensors"));
  CHECK(astrai::test::read_file(dir / "a" / "config.json") ==
        astrai::test::read_file(dir / "c" / "config.json"));
  // Only the finished directories, no temp dirs left behind.
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 3);
}

TEST_CASE("init values do not depend on the number of threads", "[unit]") {
  ModelConfig c = preset_config("qwen3-0.6b").value();
  const size_t n = 1 << 20;
  std::vector<uint16_t> one(n), many(n);
  const int saved = num_threads();
  set_num_threads(1);
  fill_init_tensor(c, seeded(7), "model.layers.3.mlp.up_proj.weight", DType::bf16, one.data(), n);
  set_num_threads(4);
  fill_init_tensor(c, seeded(7), "model.layers.3.mlp.up_proj.weight", DType::bf16, many.data(), n);
  set_num_threads(saved);
  CHECK(one == many);
  // Different tensors get different values.
  fill_init_tensor(c, seeded(7), "model.layers.4.mlp.up_proj.weight", DType::bf16, many.data(), n);
  CHECK(one != many);
}

TEST_CASE("an initialised tiny model is a complete HF directory that loads back", "[integration]") {
  TempDir dir("init");
  const fs::path m = dir / "tiny";
  REQUIRE(init_model_dir("tiny", m, seeded(3)).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"})
    CHECK(fs::exists(m / f));
  ModelConfig preset = preset_config("tiny").value();
  ModelConfig c = ModelConfig::load(m).value();
  CHECK(c.to_json() == preset.to_json());
  WeightStore ws = WeightStore::open(m).value();
  WeightRefs w = resolve_weights(c, ws).value();
  CHECK(w.embed->dtype == DType::f32);
  CHECK(w.lm_head == w.embed);
  CHECK(ws.files().front().metadata().at("format") == "pt");
  // Exactly the tensors the config needs.
  CHECK(ws.tensor_names().size() == weight_shapes(c).size());

  // The tokenizer we wrote fits the vocabulary and its eos is the config's.
  auto tok = Tokenizer::load(m).value();
  CHECK(tok->vocab_size() <= c.vocab_size);
  REQUIRE(tok->special_tokens().eos_id.has_value());
  CHECK(std::vector<int32_t>{*tok->special_tokens().eos_id} == c.eos_token_ids);
}

TEST_CASE("init's weight distribution, as the Python reference reads it", "[integration]") {
  TempDir dir("init");
  const fs::path m = dir / "tiny";
  REQUIRE(init_model_dir("tiny", m, seeded(11)).ok());
  ModelConfig c = ModelConfig::load(m).value();
  auto stats = python_stats(m);
  REQUIRE(stats.size() == weight_shapes(c).size());
  for (auto& [name, shape] : weight_shapes(c)) {
    INFO(name);
    REQUIRE(stats.count(name));
    const Stats& s = stats[name];
    CHECK(s.dtype == "F32");
    CHECK(s.shape == shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (name.find("norm") != std::string::npos) {
      CHECK(s.mean == 1.0);
      CHECK(s.std == 0.0);
      continue;
    }
    // GPT-2 style: residual projections scaled by 1 / sqrt(2 * layers).
    const bool residual =
        name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
    const double expected_std = residual ? 0.02 / std::sqrt(2.0 * double(c.num_layers)) : 0.02;
    // Mean within 5 standard errors, std within 5% (n >= 16384 here).
    CHECK(std::fabs(s.mean) < 5 * expected_std / std::sqrt(double(n)));
    CHECK(s.std == Approx(expected_std).epsilon(0.05));
  }
}

TEST_CASE("big models are sharded with an index that both readers follow", "[integration]") {
  TempDir dir("init");
  ModelConfig c = preset_config("tiny").value();
  c.architecture = "Qwen3ForCausalLM";  // exercise qk-norm tensors too
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.torch_dtype = "bfloat16";
  c.tie_word_embeddings = false;
  // ~0.67 MB of bf16 weights in shards of at most 200 KB.
  REQUIRE(
      write_random_model(c, dir.path(), with(seeded(5), [](InitOptions& o) { o.max_shard_bytes = 200000; }))
          .ok());
  CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
  WeightStore ws = WeightStore::open(dir.path()).value();
  CHECK(ws.files().size() >= 3);
  for (const SafeTensorsFile& f : ws.files()) {
    uint64_t bytes = 0;
    for (const SafeTensor& t : f.tensors()) bytes += t.nbytes;
    CHECK(bytes <= 200000);
    CHECK_THAT(f.path().filename().string(), Catch::Matches("model-0000[1-9]-of-0000[3-9]\\.safetensors"));
  }
  ModelConfig back = ModelConfig::load(dir.path()).value();
  REQUIRE(resolve_weights(back, ws).ok());
  auto stats = python_stats(dir.path());
  CHECK(stats.size() == weight_shapes(c).size());
  CHECK(stats.at("model.layers.1.self_attn.q_norm.weight").dtype == "BF16");
  CHECK(stats.at("lm_head.weight").std == Approx(0.02).epsilon(0.05));
}

TEST_CASE("init with --tokenizer copies it and fits vocab_size and eos to it", "[integration]") {
  TempDir dir("init");
  // A tokenizer with 400 tokens: the built-in one plus 141 added tokens, eos <|x100|>.
  const fs::path tokdir = dir / "tok";
  fs::create_directories(tokdir);
  astrai::test::write_file(tokdir / "tokenizer.json", builtin_tokenizer_json());
  astrai::test::write_file(tokdir / "tokenizer_config.json", builtin_tokenizer_config_json());
  const std::string py =
      "import json,sys; d=sys.argv[1]; t=json.load(open(d+'/tokenizer.json')); "
      "t['added_tokens'] += [dict(id=259+i, content='<|x%d|>' % i, single_word=False, lstrip=False, "
      "rstrip=False, "
      "normalized=False, special=True) for i in range(141)]; json.dump(t, open(d+'/tokenizer.json','w')); "
      "c=json.load(open(d+'/tokenizer_config.json')); c['eos_token']='<|x100|>'; "
      "c['added_tokens_decoder'].update({str(259+i): dict(content='<|x%d|>' % i, lstrip=False, "
      "normalized=False, "
      "rstrip=False, single_word=False, special=True) for i in range(141)}); "
      "json.dump(c, open(d+'/tokenizer_config.json','w'))";
  auto r = astrai::test::run_command(astrai::test::python3() + " -c \"" + py + "\" " + tokdir.string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(
      init_model_dir("tiny", dir / "m", with(seeded(1), [&](InitOptions& o) { o.tokenizer_dir = tokdir; }))
          .ok());
  ModelConfig c = ModelConfig::load(dir / "m").value();
  CHECK(c.vocab_size == 448);  // 400 rounded up to a multiple of 64
  CHECK(c.eos_token_ids == std::vector<int32_t>{359});
  CHECK(astrai::test::read_file(dir / "m" / "tokenizer.json") ==
        astrai::test::read_file(tokdir / "tokenizer.json"));
  WeightStore ws = WeightStore::open(dir / "m").value();
  CHECK(resolve_weights(c, ws).ok());

  auto missing = init_model_dir("tiny", dir / "m2",
                                with(seeded(0), [&](InitOptions& o) { o.tokenizer_dir = dir / "nothing"; }));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.message(), Catch::Contains("tokenizer.json"));
  CHECK_FALSE(fs::exists(dir / "m2"));
}

TEST_CASE("init refuses to write into a non-empty directory and accepts an empty one", "[unit]") {
  TempDir dir("init");
  fs::create_directories(dir / "empty");
  CHECK(init_model_dir("tiny", dir / "empty", {}).ok());
  auto again = init_model_dir("tiny", dir / "empty", {});
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.message(), Catch::Contains("not empty"));
  auto bad = init_model_dir("nope", dir / "x", {});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(), Catch::Contains("'nope'"));
}

TEST_CASE("resolve_model_dir: directories, presets materialised once into the cache, errors", "[unit]") {
  TempDir dir("src");
  ScopedEnv cache("ASTRAI_CACHE_DIR", (dir / "cache").string());
  CHECK(preset_cache_dir() == dir / "cache" / "presets");
  CHECK(resolve_model_dir(dir.path().string()).value() == dir.path());

  const fs::path p = resolve_model_dir("tiny", 9).value();
  CHECK(p == dir / "cache" / "presets" / "tiny-seed9");
  REQUIRE(fs::exists(p / "model.safetensors"));
  const auto written = fs::last_write_time(p / "model.safetensors");
  CHECK(resolve_model_dir("tiny", 9).value() == p);  // reused, not rewritten
  CHECK(fs::last_write_time(p / "model.safetensors") == written);
  TempDir direct("src");
  REQUIRE(init_model_dir("tiny", direct / "m", seeded(9)).ok());
  CHECK(astrai::test::read_file(p / "model.safetensors") ==
        astrai::test::read_file(direct / "m" / "model.safetensors"));

  auto bad = resolve_model_dir("no/such/model");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "--model 'no/such/model': no such directory and not a preset (tiny, llama-1b, qwen3-0.6b, qwen3-8b, "
        "brown)");
  {
    ScopedEnv no_astrai("ASTRAI_CACHE_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", (dir / "xdg").string());
    CHECK(preset_cache_dir() == dir / "xdg" / "astrai" / "presets");
  }
}

TEST_CASE("concurrent first uses of a preset all get the one complete directory", "[unit]") {
  TempDir dir("src");
  ScopedEnv cache("ASTRAI_CACHE_DIR", (dir / "cache").string());
  std::vector<std::thread> threads;
  std::vector<Result<fs::path>> results(4, Result<fs::path>(internal_error("not run")));
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&results, i] { results[i] = resolve_model_dir("tiny", 21); });
  for (auto& t : threads) t.join();
  for (auto& r : results) {
    INFO(r.status().message());
    REQUIRE(r.ok());
    CHECK(r.value() == dir / "cache" / "presets" / "tiny-seed21");
  }
  ModelConfig c = ModelConfig::load(results[0].value()).value();
  CHECK(resolve_weights(c, WeightStore::open(results[0].value()).value()).ok());
  // Only the finished preset remains: no temp directories left behind.
  CHECK(std::distance(fs::directory_iterator(dir / "cache" / "presets"), fs::directory_iterator()) == 1);
}

TEST_CASE("qwen3-0.6b initialises in bf16 and loads", "[slow]") {
  TempDir dir("init");
  REQUIRE(init_model_dir("qwen3-0.6b", dir / "q", seeded(1)).ok());
  ModelConfig c = ModelConfig::load(dir / "q").value();
  CHECK(c.num_parameters() == 596049920);
  WeightStore ws = WeightStore::open(dir / "q").value();
  WeightRefs w = resolve_weights(c, ws).value();
  CHECK(w.embed->dtype == DType::bf16);
  CHECK(ws.files().size() == 1);
  CHECK(fs::file_size(dir / "q" / "model.safetensors") > uint64_t(c.num_parameters()) * 2);
}

TEST_CASE("astrai init writes a model directory and reports errors with a non-zero exit", "[integration]") {
  TempDir dir("cli");
  const std::string bin = astrai::test::astrai_bin();
  auto r = astrai::test::run_command(bin + " init --preset tiny --out " + (dir / "m").string() + " --seed 4");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("tiny"));
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"})
    CHECK(fs::exists(dir / "m" / f));
  // Same bytes as the library call with the same seed.
  REQUIRE(init_model_dir("tiny", dir / "lib", seeded(4)).ok());
  CHECK(astrai::test::read_file(dir / "m" / "model.safetensors") ==
        astrai::test::read_file(dir / "lib" / "model.safetensors"));
  CHECK(resolve_weights(ModelConfig::load(dir / "m").value(), WeightStore::open(dir / "m").value()).ok());

  auto again = astrai::test::run_command(bin + " init --preset tiny --out " + (dir / "m").string());
  CHECK(again.exit_code != 0);
  CHECK_THAT(again.err, Catch::Contains("not empty"));
  auto bad = astrai::test::run_command(bin + " init --preset huge --out " + (dir / "x").string());
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Contains("huge"));
  auto no_out = astrai::test::run_command(bin + " init --preset tiny");
  CHECK(no_out.exit_code != 0);
  CHECK_THAT(no_out.err, Catch::Contains("--out"));
  auto bf16 =
      astrai::test::run_command(bin + " init --preset tiny --dtype bf16 --out " + (dir / "b").string());
  REQUIRE(bf16.exit_code == 0);
  CHECK(ModelConfig::load(dir / "b").value().torch_dtype == "bfloat16");
  CHECK(WeightStore::open(dir / "b").value().find("model.norm.weight")->dtype == DType::bf16);
}
