// fp8 checkpoints (Qwen3-FP8's 128 x 128 blocks, AutoFP8's one scale, llm-compressor's one a row):
// each e4m3 matrix widens at load through Backend::dequantize, so on the CPU an fp8 checkpoint gives,
// bit for bit, the logits of the f32 checkpoint that holds its widened values, whole and in
// tensor-parallel shards (whose cuts take their blocks of scales along); and the checkpoint errors
// a user can meet name the tensor.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <random>

#include "model/fp8_check.h"
#include "src/backend/backend.h"
#include "src/model/model.h"
#include "src/model/tp_model.h"
#include "src/model/weights.h"
#include "tools/test_util.h"

namespace astrai::test {

TEST_CASE("an fp8 checkpoint on the cpu gives the logits of its widened f32 copy bit for bit", "[unit]") {
  // Blocks that divide no dimension, Qwen3-FP8's (one block over these small matrices), small ones.
  auto cpu = [] { return make_backend(BackendOptions{}).value(); };
  check_fp8_matches_widened(qwen3_style_config(), {48, 40, {0, 1, 2}}, cpu);
  check_fp8_matches_widened(gqa4_bias_config(), {128, 128, {2}}, cpu);
  // Asked to keep fp8, the CPU widens all the same (its linear takes no fp8 weights).
  LoadOptions keep;
  keep.keep_fp8 = true;
  check_fp8_matches_widened(gqa4_bias_config(), {128, 128, {2}}, cpu, "", keep);
  check_fp8_matches_widened(preset_config("tiny").value(), {16, 8, {0, 1, 2}}, cpu);
  // llm-compressor's FP8-dynamic form: compressed-tensors, one scale a row (or one in all).
  check_fp8_matches_widened(qwen3_style_config(), {0, 0, {0, 1}}, cpu,
                            R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                                "ignore": ["lm_head"], "quantization_status": "compressed",
                                "config_groups": {"group_0": {"targets": ["Linear"],
                                  "input_activations": {"dynamic": true, "num_bits": 8, "type": "float"},
                                  "weights": {"num_bits": 8, "strategy": "channel", "type": "float"}}}})");
}

TEST_CASE("astrai score on an fp8 model directory writes its widened copy's output and says what it loaded",
          "[integration]") {
  const ModelConfig cfg = preset_config("tiny").value();  // the byte tokenizer's vocabulary
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir src("f32w"), fp8("fp8w"), wide("widew"), io("fp8io");
  write_random_model(src.path(), cfg, seed, DType::f32, nullptr, /*with_tokenizer=*/true);
  write_fp8_model(src.path(), fp8.path(), wide.path(), {48, 40, {0, 1, 2}}, seed);
  std::mt19937_64 rng(seed);
  write_file(io / "in.jsonl",
             "{\"id\": \"a\", \"ids\": " + ids_json(random_ids(rng, 40, cfg.vocab_size)) + "}\n");
  auto score = [&](const TempDir& model, const std::string& out, const std::string& flags = "") {
    auto r = run_command(astrai_bin() + " score --model '" + model.path().string() + "' --input '" +
                         (io / "in.jsonl").string() + "' --output '" + (io / out).string() +
                         "' --log-level debug" + flags);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return r.out + r.err;
  };
  const std::string log = score(fp8, "fp8.jsonl");
  score(wide, "wide.jsonl");
  CHECK_THAT(log, Catch::Contains("fp8 weights (quant_method fp8) widened to f32 at load"));
  REQUIRE(read_file(io / "fp8.jsonl") == read_file(io / "wide.jsonl"));
  // --fp8-weights keep on the CPU: widened all the same, and said so.
  CHECK_THAT(score(fp8, "keep.jsonl", " --fp8-weights keep"),
             Catch::Contains("fp8 weights (quant_method fp8) widened to f32 at load"));
  REQUIRE(read_file(io / "keep.jsonl") == read_file(io / "wide.jsonl"));
  CHECK(read_file(io / "fp8.jsonl").find("\"logprobs\"") != std::string::npos);
}

TEST_CASE("tensor-parallel fp8 shards cut their scales with their rows and columns",
          "[integration][threads]") {
  const ModelConfig cfg =
      preset_config("tiny").value();  // q 128 rows, k/v 64, gate/up 256; o 128, down 256 cols
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir src("f32w"), fp8("fp8w"), wide("widew");
  write_random_model(src.path(), cfg, seed);
  // 32 x 32 blocks: every rank's cut at tp 2 (k's 32 rows, o's 64 columns) falls on a block edge.
  write_fp8_model(src.path(), fp8.path(), wide.path(), {32, 32, {0, 1, 2}}, seed);
  std::mt19937_64 rng(seed);
  const int steps = 4;
  const Prompts p = draw_prompts(cfg, rng, steps);
  auto run = [&](const std::filesystem::path& dir) {
    WeightStore store = WeightStore::open(dir).value();
    const ModelConfig c = ModelConfig::load(dir).value();
    auto rank0 = make_backend(BackendOptions{}).value();
    std::vector<std::unique_ptr<Backend>> others;
    others.push_back(make_backend(BackendOptions{}).value());
    auto tp = make_tensor_parallel(c, store, *rank0, std::move(others));
    REQUIRE(tp.ok());
    return greedy(*tp.value(), p.seqs, p.cut, steps, p.pages, p.num_pages);
  };
  const GreedyRun got = run(fp8.path()), want = run(wide.path());
  REQUIRE(got.seqs == want.seqs);
  for (size_t s = 0; s < want.logits.size(); ++s) {
    INFO("step " << s);
    const std::vector<double> ref(want.logits[s].begin(), want.logits[s].end());
    CHECK(max_row_rel_error(got.logits[s], ref, cfg.vocab_size) < 1e-6);
  }

  // Blocks a rank's cut would fall inside are refused, naming the tensor.
  TempDir fp8b("fp8b"), wideb("wideb");
  write_fp8_model(src.path(), fp8b.path(), wideb.path(), {48, 48, {2}}, seed);
  WeightStore store = WeightStore::open(fp8b.path()).value();
  auto rank0 = make_backend(BackendOptions{}).value();
  std::vector<std::unique_ptr<Backend>> others;
  others.push_back(make_backend(BackendOptions{}).value());
  auto bad = make_tensor_parallel(ModelConfig::load(fp8b.path()).value(), store, *rank0, std::move(others));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("--tp 2: fp8 tensor 'model.layers.0.self_attn.") &&
                                         Catch::Contains("has scales in blocks of 48"));
}

TEST_CASE("fp8 checkpoint errors name the tensor: no scale, a scale of the wrong shape, an fp8 norm",
          "[unit]") {
  const ModelConfig cfg = preset_config("tiny").value();
  const uint64_t seed = fresh_seed();
  TempDir src("f32w"), fp8("fp8w"), wide("widew");
  write_random_model(src.path(), cfg, seed);
  write_fp8_model(src.path(), fp8.path(), wide.path(), {32, 32, {2}}, seed);
  const ModelConfig c = ModelConfig::load(fp8.path()).value();
  const WeightStore good = WeightStore::open(fp8.path()).value();
  const WeightRefs refs = resolve_weights(c, good).value();
  // Every linear weight of every layer is fp8 with its scales found.
  CHECK(refs.scales.size() == size_t(7 * cfg.num_layers));
  const WeightScale* q0 = refs.scale_of(refs.layers[0].q);
  REQUIRE(q0);
  CHECK((q0->block_rows == 32 && q0->block_cols == 32 && q0->scale->shape == std::vector<int64_t>{4, 4}));

  // Rewrites the fp8 checkpoint with `edit` applied to its tensors, then resolves it.
  auto resolve_edited = [&](const std::function<void(std::vector<TensorToWrite>&)>& edit,
                            const ModelConfig& conf) {
    std::vector<TensorToWrite> list;
    for (const SafeTensor& t : good.files()[0].tensors()) list.push_back({t.name, t.dtype, t.shape, t.data});
    edit(list);
    TempDir d("fp8edit");
    REQUIRE(write_safetensors(d.path() / "model.safetensors", list).ok());
    return resolve_weights(conf, WeightStore::open(d.path()).value()).status();
  };
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  auto scale_name = [&](const std::vector<TensorToWrite>& l) {
    for (const auto& t : l)
      if (t.name.rfind(q + "_scale", 0) == 0) return t.name;
    return std::string();
  };
  Status st = resolve_edited(
      [&](auto& l) {
        const std::string n = scale_name(l);
        std::erase_if(l, [&](const TensorToWrite& t) { return t.name == n; });
      },
      c);
  CHECK_THAT(st.message(),
             Catch::Contains("'" + q + "' is F8_E4M3 but the checkpoint has no '" + q + "_scale_inv'"));
  st = resolve_edited(
      [&](auto& l) {
        for (auto& t : l)
          if (t.name == scale_name(l)) t.shape = {2, 8};
      },
      c);
  CHECK_THAT(st.message(),
             Catch::Contains("has shape [2, 8], expected [1], [128] (one a row), [4, 4] (blocks of "
                             "32 x 32) for '" +
                             q + "' [128, 128]"));
  ModelConfig no_blocks = c;
  no_blocks.quantization.block_rows = no_blocks.quantization.block_cols = 0;
  st = resolve_edited([](auto&) {}, no_blocks);
  CHECK_THAT(st.message(), Catch::Contains("need config.json's quantization_config block size"));
  std::vector<uint8_t> norm_bytes(size_t(cfg.hidden_size), 0x38);
  st = resolve_edited(
      [&](auto& l) {
        for (auto& t : l)
          if (t.name == "model.layers.0.input_layernorm.weight") {
            t.dtype = DType::fp8_e4m3;
            t.data = norm_bytes.data();
          }
      },
      c);
  CHECK_THAT(st.message(),
             Catch::Contains(
                 "'model.layers.0.input_layernorm.weight' has dtype F8_E4M3, expected F32, BF16 or F16"));
}

TEST_CASE("stack_scales stacks q/k/v or gate/up scales into one grid, or says the matrix widens", "[unit]") {
  const int64_t C = 300;
  // A part of R rows in blocks of br x bc, its scale grid filled with `base` + its index.
  struct Part {
    SafeTensor t, s;
    std::vector<float> v;
    WeightScale ws;
    Part(int64_t R, int64_t br, int64_t bc, float base) {
      t.shape = {R, C};
      t.dtype = DType::fp8_e4m3;
      const int64_t sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
      for (int64_t i = 0; i < sr * sc; ++i) v.push_back(base + float(i));
      s.shape = {sr, sc};
      s.data = v.data();
      s.nbytes = v.size() * sizeof(float);
      ws = {&s, br, bc};
    }
    WeightPart part() const { return {&t, &ws}; }
  };
  SECTION("blocks every part ends on: the grids one after the other") {
    const Part q(256, 128, 128, 1), k(128, 128, 128, 100), v(100, 128, 128, 200);
    const auto st = stack_scales({q.part(), k.part(), v.part()}, C);
    REQUIRE(st);
    CHECK(st->block_rows == 128);
    CHECK(st->block_cols == 128);
    CHECK(st->cols == 3);
    std::vector<float> want = q.v;
    want.insert(want.end(), k.v.begin(), k.v.end());
    want.insert(want.end(), v.v.begin(), v.v.end());
    CHECK(st->grid == want);
  }
  SECTION("one scale a matrix and one a row: one a row, a matrix's repeated down its rows") {
    const Part q(4, 4, C, 7), k(3, 1, C, 20), v(2, 2, C, 50);
    const auto st = stack_scales({q.part(), k.part(), v.part()}, C);
    REQUIRE(st);
    CHECK(st->block_rows == 1);
    CHECK(st->block_cols == C);
    CHECK(st->grid == std::vector<float>{7, 7, 7, 7, 20, 21, 22, 50, 50});
  }
  SECTION("blocks a part does not end on: one row a block, each row its block's scales") {
    const Part gate(3, 2, 128, 1), up(2, 2, 128, 10);
    const auto st = stack_scales({gate.part(), up.part()}, C);
    REQUIRE(st);
    CHECK(st->block_rows == 1);
    CHECK(st->grid == std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 10, 11, 12, 10, 11, 12});
  }
  SECTION("column blocks that differ, a scale out of range, a part without scales: nullopt") {
    const Part a(8, 8, 128, 1), b(8, 8, C, 1);
    CHECK_FALSE(stack_scales({a.part(), b.part()}, C));
    Part big(8, 8, 128, 1);
    big.v[1] = 65536.0f;
    CHECK_FALSE(stack_scales({big.part()}, C));
    big.v[1] = std::numeric_limits<float>::infinity();
    CHECK_FALSE(stack_scales({big.part()}, C));
    CHECK_FALSE(stack_scales({WeightPart(&a.t)}, C));
  }
}

}  // namespace astrai::test
