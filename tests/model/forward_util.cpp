#include "model/forward_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "src/core/status.h"
#include "src/model/safetensors.h"
#include "src/model/weights.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace fs = std::filesystem;

void write_random_model(const fs::path& dir, const ModelConfig& c, uint64_t seed, DType file_dtype,
                        const std::function<void(std::vector<TensorSpec>&)>& edit, bool with_tokenizer,
                        bool bf16_values) {
  fs::create_directories(dir);
  write_file(dir / "config.json", c.to_json());
  if (with_tokenizer) {
    write_file(dir / "tokenizer.json", builtin_tokenizer_json());
    write_file(dir / "tokenizer_config.json", builtin_tokenizer_config_json());
  }
  std::mt19937_64 rng(seed);
  std::vector<TensorSpec> specs;
  for (auto& [name, shape] : weight_shapes(c)) specs.push_back({name, file_dtype, shape});
  if (edit) edit(specs);
  auto fill = [&](size_t i, void* dst, size_t) -> Status {
    const TensorSpec& s = specs[i];
    const std::string& n = s.name;
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    float lo, hi;
    if (n.find("norm") != std::string::npos) {
      lo = 0.7f, hi = 1.3f;
    } else if (n.find("bias") != std::string::npos) {
      lo = -0.2f, hi = 0.2f;
    } else if (n.find("embed_tokens") != std::string::npos) {
      lo = -1.0f, hi = 1.0f;
    } else {
      hi = 1.5f / std::sqrt(float(s.shape.back()));
      lo = -hi;
    }
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t j = 0; j < numel; ++j) {
      float v = u(rng);
      if (bf16_values) v = bf16_to_f32(f32_to_bf16(v));
      switch (file_dtype) {
        case DType::f32: static_cast<float*>(dst)[j] = v; break;
        case DType::bf16: static_cast<uint16_t*>(dst)[j] = f32_to_bf16(v); break;
        case DType::f16: static_cast<uint16_t*>(dst)[j] = f32_to_f16(v); break;
        default: return internal_error("unsupported test dtype");
      }
    }
    return {};
  };
  check(write_safetensors(dir / "model.safetensors", specs, fill));
}

std::vector<double> reference_logits(const fs::path& model_dir, const std::vector<int32_t>& ids) {
  return reference_logits(model_dir, std::vector<std::vector<int32_t>>{ids}, 0)[0];
}

std::vector<std::vector<double>> reference_logits(const fs::path& model_dir,
                                                  const std::vector<std::vector<int32_t>>& seqs,
                                                  int64_t vocab) {
  TempDir tmp("ref");
  std::string list = "[";
  for (size_t s = 0; s < seqs.size(); ++s) {
    list += s ? ",[" : "[";
    for (size_t i = 0; i < seqs[s].size(); ++i) list += (i ? "," : "") + std::to_string(seqs[s][i]);
    list += "]";
  }
  write_file(tmp / "ids.json", list + "]");
  const std::string cmd = python3() + " " + (source_dir() / "tests/model/reference.py").string() +
                          " logits '" + model_dir.string() + "' '" + (tmp / "ids.json").string() + "' '" +
                          (tmp / "logits.bin").string() + "'";
  CommandResult r = run_command(cmd);
  if (r.exit_code != 0) throw std::runtime_error("reference.py failed: " + r.err);
  const std::string raw = read_file(tmp / "logits.bin");
  std::vector<double> all(raw.size() / sizeof(double));
  std::memcpy(all.data(), raw.data(), all.size() * sizeof(double));
  if (seqs.size() == 1) return {all};
  std::vector<std::vector<double>> out;
  size_t off = 0;
  for (const auto& s : seqs) {
    const size_t n = s.size() * size_t(vocab);
    if (off + n > all.size()) throw std::runtime_error("reference.py wrote fewer logits than expected");
    out.emplace_back(all.begin() + long(off), all.begin() + long(off + n));
    off += n;
  }
  return out;
}

std::vector<SeqPages> random_pages(const std::vector<int64_t>& lengths, int page_size, int num_pages,
                                   std::mt19937_64& rng) {
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<SeqPages> out;
  size_t next = 0;
  for (int64_t len : lengths) {
    SeqPages s;
    s.page_size = page_size;
    for (int64_t p = 0; p < (len + page_size - 1) / page_size; ++p) {
      if (next >= perm.size()) throw std::runtime_error("random_pages: cache too small");
      s.pages.push_back(perm[next++]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

ForwardBatch make_batch(const std::vector<Chunk>& chunks) {
  ForwardBatchBuilder b(chunks.empty() ? 16 : chunks[0].pages->page_size);
  for (const Chunk& c : chunks)
    b.add_sequence(*c.ids, int(c.p0), int(c.p1 - c.p0), c.pages->pages, LogitRows::all);
  return b.finish();
}

std::vector<float> run_forward(Model& model, const ForwardBatch& batch, KvCache& kv) {
  Result<Tensor> r = model.forward(batch, kv);
  if (!r.ok()) throw std::runtime_error("forward failed: " + r.status().message());
  std::vector<float> host(size_t(r.value().numel()));
  model.backend().synchronize();
  model.backend().download(host.data(), r.value());
  return host;
}

double max_row_rel_error(const std::vector<float>& got, const std::vector<double>& want, int64_t vocab) {
  if (got.size() != want.size()) throw std::runtime_error("max_row_rel_error: sizes differ");
  double worst = 0;
  for (size_t r = 0; r < got.size() / size_t(vocab); ++r) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const double d = double(got[r * vocab + j]) - want[r * vocab + j];
      num += d * d;
      den += want[r * vocab + j] * want[r * vocab + j];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  return worst;
}

std::vector<int32_t> random_ids(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> u(0, int32_t(vocab) - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& i : ids) i = u(rng);
  return ids;
}

ModelConfig qwen3_style_config() {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 300;
  c.hidden_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;  // q_dim 128 != hidden 96
  c.intermediate_size = 160;
  c.qk_norm = true;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 1024;
  return c;
}

ModelConfig gqa4_bias_config() {
  ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 512;
  c.attention_bias = true;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 1024;
  return c;
}

void write_fp8_model(const fs::path& src, const fs::path& fp8, const fs::path& widened,
                     const Fp8Layout& layout, uint64_t seed, const std::string& quantization_config) {
  std::mt19937_64 rng(seed);
  const WeightStore store = WeightStore::open(src).value();
  // Positive e4m3 values in byte order (0x00 .. 0x7e, increasing): the nearest code by bisection.
  std::vector<float> codes;
  for (int b = 0; b < 0x7f; ++b) codes.push_back(fp8_e4m3_to_f32(uint8_t(b)));
  auto encode = [&](float x) {
    const float a = std::min(std::fabs(x), 448.0f);
    const size_t hi = size_t(std::lower_bound(codes.begin(), codes.end(), a) - codes.begin());
    size_t best = std::min(hi, codes.size() - 1);
    if (hi > 0 && (hi == codes.size() || a - codes[hi - 1] < codes[hi] - a)) best = hi - 1;
    return uint8_t(best | (x < 0 ? 0x80 : 0));
  };
  struct Out {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Out> fp8_tensors, wide_tensors;
  auto copy_of = [](const SafeTensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    return Out{t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.nbytes)};
  };
  for (const std::string& name : store.tensor_names()) {
    const SafeTensor& t = *store.find(name);
    if (t.dtype != DType::f32) throw std::runtime_error("write_fp8_model: '" + name + "' is not f32");
    const bool linear = t.shape.size() == 2 && name.size() > 12 && name.ends_with("_proj.weight");
    if (!linear) {
      fp8_tensors.push_back(copy_of(t));
      wide_tensors.push_back(copy_of(t));
      continue;
    }
    const int64_t R = t.shape[0], C = t.shape[1];
    const int kind = layout.layouts[size_t(rng() % layout.layouts.size())];
    const int64_t br = kind == 0 ? R : kind == 1 ? 1 : layout.block_rows;
    const int64_t bc = kind == 2 ? layout.block_cols : C;
    const int64_t sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
    const DType sdt = rng() % 2 ? DType::f32 : DType::bf16;
    const auto* w = static_cast<const float*>(t.data);
    std::vector<float> scales(size_t(sr * sc));
    for (int64_t bi = 0; bi < sr; ++bi)
      for (int64_t bj = 0; bj < sc; ++bj) {
        float amax = 0;
        for (int64_t i = bi * br; i < std::min(R, (bi + 1) * br); ++i)
          for (int64_t j = bj * bc; j < std::min(C, (bj + 1) * bc); ++j)
            amax = std::max(amax, std::fabs(w[i * C + j]));
        float s = amax > 0 ? amax / 448.0f : 1.0f;
        if (sdt == DType::bf16) s = bf16_to_f32(f32_to_bf16(s));
        scales[size_t(bi * sc + bj)] = s;
      }
    Out q{name, DType::fp8_e4m3, t.shape, std::vector<uint8_t>(size_t(R * C))};
    std::vector<float> wide(size_t(R * C));
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const float s = scales[size_t((i / br) * sc + j / bc)];
        const uint8_t b = encode(w[i * C + j] / s);
        q.bytes[size_t(i * C + j)] = b;
        wide[size_t(i * C + j)] = float(double(fp8_e4m3_to_f32(b)) * double(s));
      }
    fp8_tensors.push_back(std::move(q));
    Out sout{name + (rng() % 2 ? "_scale_inv" : "_scale"), sdt, {sr, sc}, {}};
    if (kind == 0 && rng() % 2) sout.shape = {1};
    if (kind == 1 && rng() % 2) sout.shape = {R};
    if (sdt == DType::f32) {
      sout.bytes.resize(scales.size() * 4);
      std::memcpy(sout.bytes.data(), scales.data(), sout.bytes.size());
    } else {
      std::vector<uint16_t> h(scales.size());
      for (size_t k = 0; k < h.size(); ++k) h[k] = f32_to_bf16(scales[k]);
      sout.bytes.resize(h.size() * 2);
      std::memcpy(sout.bytes.data(), h.data(), sout.bytes.size());
    }
    fp8_tensors.push_back(std::move(sout));
    Out wout{name, DType::f32, t.shape, std::vector<uint8_t>(wide.size() * 4)};
    std::memcpy(wout.bytes.data(), wide.data(), wout.bytes.size());
    wide_tensors.push_back(std::move(wout));
  }
  auto write = [&](const fs::path& dir, const std::vector<Out>& outs, const std::string& quant) {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(src))
      if (e.path().extension() != ".safetensors" && e.path().filename() != "config.json")
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    std::string config = read_file(src / "config.json");
    if (!quant.empty()) config.insert(config.find('{') + 1, "\n  \"quantization_config\": " + quant + ",");
    write_file(dir / "config.json", config);
    std::vector<TensorToWrite> list;
    for (const Out& o : outs) list.push_back({o.name, o.dtype, o.shape, o.bytes.data()});
    if (Status st = write_safetensors(dir / "model.safetensors", list); !st.ok())
      throw std::runtime_error("write_fp8_model: " + st.message());
  };
  write(
      fp8, fp8_tensors,
      !quantization_config.empty()
          ? quantization_config
          : R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [)" +
                std::to_string(layout.block_rows) + ", " + std::to_string(layout.block_cols) + "]}");
  write(widened, wide_tensors, "");
}

}  // namespace astrai::test
