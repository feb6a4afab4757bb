// HF tensor names and shapes per architecture, and resolve_weights on good and bad stores.
#include "src/model/weights.h"

#include <catch2/catch.hpp>
#include <set>

#include "tools/test_util.h"

namespace fs = std::filesystem;
using namespace astrai;
using astrai::test::TempDir;

namespace {

// A small config of the given architecture with head_dim != hidden / heads.
ModelConfig small(const std::string& arch) {
  ModelConfig c = preset_config("tiny").value();
  c.architecture = arch;
  c.hidden_size = 48;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 40;
  c.num_layers = 3;
  c.vocab_size = 300;
  c.tie_word_embeddings = false;
  c.attention_bias = arch == "Qwen2ForCausalLM";
  c.qk_norm = arch == "Qwen3ForCausalLM";
  return c;
}

// Writes every tensor of `shapes` (f32 zeros unless dtype says otherwise) to dir/model.safetensors.
void write_model(const fs::path& dir, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                 DType dtype = DType::f32) {
  static std::vector<char> zeros(1 << 22);
  std::vector<TensorToWrite> t;
  for (auto& [n, s] : shapes) t.push_back({n, dtype, s, zeros.data()});
  REQUIRE(write_safetensors(dir / "model.safetensors", t).ok());
}

std::map<std::string, std::vector<int64_t>> as_map(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("weight_shapes lists the HF names and shapes of each architecture", "[unit]") {
  for (const char* arch :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    INFO(arch);
    ModelConfig c = small(arch);
    auto shapes = weight_shapes(c);
    auto m = as_map(shapes);
    CHECK(m.size() == shapes.size());  // no duplicates
    CHECK(m.at("model.embed_tokens.weight") == std::vector<int64_t>{300, 48});
    CHECK(m.at("lm_head.weight") == std::vector<int64_t>{300, 48});
    CHECK(m.at("model.norm.weight") == std::vector<int64_t>{48});
    CHECK(m.at("model.layers.2.self_attn.q_proj.weight") == std::vector<int64_t>{64, 48});
    CHECK(m.at("model.layers.2.self_attn.k_proj.weight") == std::vector<int64_t>{32, 48});
    CHECK(m.at("model.layers.2.self_attn.v_proj.weight") == std::vector<int64_t>{32, 48});
    CHECK(m.at("model.layers.2.self_attn.o_proj.weight") == std::vector<int64_t>{48, 64});
    CHECK(m.at("model.layers.0.mlp.gate_proj.weight") == std::vector<int64_t>{40, 48});
    CHECK(m.at("model.layers.0.mlp.up_proj.weight") == std::vector<int64_t>{40, 48});
    CHECK(m.at("model.layers.0.mlp.down_proj.weight") == std::vector<int64_t>{48, 40});
    CHECK(m.at("model.layers.1.input_layernorm.weight") == std::vector<int64_t>{48});
    CHECK(m.at("model.layers.1.post_attention_layernorm.weight") == std::vector<int64_t>{48});
    CHECK(m.count("model.layers.3.input_layernorm.weight") == 0);
    CHECK(m.count("model.layers.0.self_attn.q_proj.bias") == size_t(c.attention_bias));
    if (c.attention_bias) {
      CHECK(m.at("model.layers.0.self_attn.q_proj.bias") == std::vector<int64_t>{64});
      CHECK(m.at("model.layers.0.self_attn.k_proj.bias") == std::vector<int64_t>{32});
      CHECK(m.at("model.layers.0.self_attn.v_proj.bias") == std::vector<int64_t>{32});
    }
    CHECK(m.count("model.layers.0.self_attn.o_proj.bias") == 0);
    CHECK(m.count("model.layers.0.self_attn.q_norm.weight") == size_t(c.qk_norm));
    if (c.qk_norm) {
      CHECK(m.at("model.layers.0.self_attn.q_norm.weight") == std::vector<int64_t>{16});
      CHECK(m.at("model.layers.0.self_attn.k_norm.weight") == std::vector<int64_t>{16});
    }
    // The element count of the listed tensors is the config's parameter count.
    int64_t n = 0;
    for (auto& [name, s] : shapes) {
      int64_t k = 1;
      for (int64_t d : s) k *= d;
      n += k;
    }
    CHECK(n == c.num_parameters());
    c.tie_word_embeddings = true;
    CHECK(as_map(weight_shapes(c)).count("lm_head.weight") == 0);
  }
}

TEST_CASE("weight_shapes element counts match every preset's parameter count", "[unit]") {
  for (const std::string& p : preset_names()) {
    ModelConfig c = preset_config(p).value();
    int64_t n = 0;
    for (auto& [name, s] : weight_shapes(c)) {
      int64_t k = 1;
      for (int64_t d : s) k *= d;
      n += k;
    }
    CHECK(n == c.num_parameters());
  }
}

TEST_CASE("resolve_weights finds every tensor of a complete store", "[unit]") {
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    INFO(arch);
    TempDir dir("w");
    ModelConfig c = small(arch);
    write_model(dir.path(), weight_shapes(c), DType::bf16);
    WeightStore ws = WeightStore::open(dir.path()).value();
    auto r = resolve_weights(c, ws);
    REQUIRE(r.ok());
    const WeightRefs& w = r.value();
    REQUIRE(w.layers.size() == 3);
    CHECK(w.embed->name == "model.embed_tokens.weight");
    CHECK(w.lm_head->name == "lm_head.weight");
    CHECK(w.final_norm->name == "model.norm.weight");
    const LayerWeightRefs& l = w.layers[2];
    CHECK(l.q->name == "model.layers.2.self_attn.q_proj.weight");
    CHECK(l.o->name == "model.layers.2.self_attn.o_proj.weight");
    CHECK(l.down->name == "model.layers.2.mlp.down_proj.weight");
    CHECK(l.post_norm->name == "model.layers.2.post_attention_layernorm.weight");
    CHECK((l.q_bias != nullptr) == c.attention_bias);
    CHECK((l.v_bias != nullptr) == c.attention_bias);
    CHECK((l.k_norm != nullptr) == c.qk_norm);
    CHECK(l.o_bias == nullptr);
    std::set<const SafeTensor*> distinct;
    for (const auto& layer : w.layers)
      for (const SafeTensor* t : {layer.input_norm, layer.q, layer.k, layer.v, layer.o, layer.post_norm,
                                  layer.gate, layer.up, layer.down})
        distinct.insert(t);
    CHECK(distinct.size() == 27);
  }
}

TEST_CASE("tied embeddings use embed_tokens as the LM head and ignore a stored lm_head", "[unit]") {
  TempDir dir("w");
  ModelConfig c = small("LlamaForCausalLM");
  auto shapes = weight_shapes(c);  // untied: includes lm_head.weight
  write_model(dir.path(), shapes);
  c.tie_word_embeddings = true;
  WeightStore ws = WeightStore::open(dir.path()).value();
  WeightRefs w = resolve_weights(c, ws).value();
  CHECK(w.lm_head == w.embed);
}

TEST_CASE("Llama with attention_bias needs o_proj.bias too", "[unit]") {
  TempDir dir("w");
  ModelConfig c = small("LlamaForCausalLM");
  c.attention_bias = c.o_proj_bias = true;
  auto shapes = weight_shapes(c);
  CHECK(as_map(shapes).at("model.layers.1.self_attn.o_proj.bias") == std::vector<int64_t>{48});
  write_model(dir.path(), shapes);
  WeightStore ws = WeightStore::open(dir.path()).value();
  WeightRefs w = resolve_weights(c, ws).value();
  CHECK(w.layers[1].o_bias->name == "model.layers.1.self_attn.o_proj.bias");
}

TEST_CASE("resolve_weights names the file and tensor that is missing, misshapen or of a bad dtype",
          "[unit]") {
  TempDir dir("w");
  ModelConfig c = small("Qwen3ForCausalLM");
  auto shapes = weight_shapes(c);

  SECTION("missing tensor") {
    shapes.erase(std::remove_if(shapes.begin(), shapes.end(),
                                [](auto& p) { return p.first == "model.layers.1.self_attn.k_norm.weight"; }),
                 shapes.end());
    write_model(dir.path(), shapes);
    auto r = resolve_weights(c, WeightStore::open(dir.path()).value());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(),
               Catch::Contains("missing tensor 'model.layers.1.self_attn.k_norm.weight'") &&
                   Catch::Contains("model.safetensors"));
  }
  SECTION("untied model without lm_head") {
    shapes.pop_back();
    write_model(dir.path(), shapes);
    auto r = resolve_weights(c, WeightStore::open(dir.path()).value());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("'lm_head.weight'"));
  }
  SECTION("wrong shape") {
    for (auto& [n, s] : shapes)
      if (n == "model.layers.0.mlp.down_proj.weight") s = {40, 48};
    write_model(dir.path(), shapes);
    auto r = resolve_weights(c, WeightStore::open(dir.path()).value());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          "model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape [40, 48], expected [48, "
          "40]");
  }
  SECTION("integer dtype") {
    write_model(dir.path(), shapes, DType::i32);
    auto r = resolve_weights(c, WeightStore::open(dir.path()).value());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("model.safetensors") &&
                                         Catch::Contains("'model.embed_tokens.weight'") &&
                                         Catch::Contains("I32"));
  }
}
