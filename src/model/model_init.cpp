#include "src/model/model_init.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "src/core/json_writer.h"
#include "src/core/threads.h"
#include "src/model/safetensors.h"
#include "src/model/weights.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {
namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A unit-variance, zero-mean sample from 64 random bits: the sum of four 16-bit uniforms
// (Irwin-Hall, variance 4/12) centred and scaled by sqrt(3).
inline float unit_normal(uint64_t bits) {
  const float s = float(bits & 0xffff) + float((bits >> 16) & 0xffff) + float((bits >> 32) & 0xffff) +
                  float(bits >> 48) + 2.0f;  // + 4 * 0.5: midpoints of the 2^16 bins
  return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) return io_error(p.string() + ": cannot create");
  f << text;
  f.close();
  if (!f) return io_error(p.string() + ": write failed");
  return {};
}

void write_ids(JsonWriter& w, const std::vector<int32_t>& ids) {
  if (ids.empty())
    w.null();
  else if (ids.size() == 1)
    w.value(int64_t(ids[0]));
  else {
    w.begin_array();
    for (int32_t x : ids) w.value(int64_t(x));
    w.end_array();
  }
}

std::string generation_config_json(const ModelConfig& c) {
  JsonWriter w;
  w.begin_object();
  w.key("_from_model_config").value(true);
  w.key("bos_token_id");
  write_ids(w, c.bos_token_ids);
  w.key("eos_token_id");
  write_ids(w, c.eos_token_ids);
  w.end_object();
  return w.take();
}

// Copies the tokenizer files and fits the config to the tokenizer (vocab size, bos/eos).
Status copy_tokenizer(ModelConfig& c, const fs::path& from, const fs::path& dir,
                      bool& copied_generation_config) {
  std::error_code ec;
  if (!fs::exists(from / "tokenizer.json", ec))
    return not_found("--tokenizer " + from.string() + ": no tokenizer.json there");
  ASTRAI_ASSIGN_OR_RETURN(auto tok, Tokenizer::load(from));
  const int64_t n = tok->vocab_size();
  if (n > c.vocab_size) c.vocab_size = (n + 63) / 64 * 64;
  const SpecialTokens& sp = tok->special_tokens();
  c.bos_token_ids.clear();
  c.eos_token_ids.clear();
  if (sp.bos_id) c.bos_token_ids = {*sp.bos_id};
  if (sp.eos_id) c.eos_token_ids = {*sp.eos_id};
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "chat_template.jinja"}) {
    if (!fs::exists(from / name, ec)) continue;
    fs::copy_file(from / name, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return io_error("cannot copy " + (from / name).string() + " to " + dir.string() + ": " + ec.message());
    if (std::string_view(name) == "generation_config.json") copied_generation_config = true;
  }
  return {};
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

Result<DType> torch_dtype_to_dtype(std::string_view t) {
  if (t == "float32" || t == "float") return DType::f32;
  if (t == "bfloat16") return DType::bf16;
  if (t == "float16" || t == "half") return DType::f16;
  return unsupported("torch_dtype '" + std::string(t) + "' is not supported (float32, bfloat16, float16)");
}

void fill_init_tensor(const ModelConfig& c, const InitOptions& o, std::string_view name, DType dtype,
                      void* dst, size_t numel) {
  float mean = 0.0f, std = 0.02f;
  if (ends_with(name, "norm.weight")) {  // input/post-attention/final/q/k norms
    mean = 1.0f;
    std = o.norm_jitter;
  } else if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight")) {
    std = 0.02f / std::sqrt(2.0f * float(std::max<int64_t>(c.num_layers, 1)));
  }
  const uint64_t key = splitmix64(o.seed ^ splitmix64(fnv1a(name)));
  const int64_t n = int64_t(numel);
  auto value = [&](int64_t i) {
    return std == 0.0f ? mean : mean + std * unit_normal(splitmix64(key + uint64_t(i)));
  };
  // The process's --threads, named on each region: OpenMP's own count belongs to the calling thread,
  // and this runs on whichever thread loads the model (the server's loader thread, `astrai init`).
  const int threads = num_threads();
  switch (dtype) {
    case DType::f32: {
      float* p = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) p[i] = value(i);
      break;
    }
    case DType::bf16: {
      uint16_t* p = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(value(i));
      break;
    }
    case DType::f16: {
      uint16_t* p = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(value(i));
      break;
    }
    default: break;  // init writes float weights only (write_random_model checks)
  }
}

Status write_random_model(ModelConfig c, const fs::path& dir, const InitOptions& o) {
  bool copied_generation_config = false;
  if (o.tokenizer_dir.empty()) {
    ASTRAI_RETURN_IF_ERROR(write_text(dir / "tokenizer.json", builtin_tokenizer_json()));
    ASTRAI_RETURN_IF_ERROR(write_text(dir / "tokenizer_config.json", builtin_tokenizer_config_json()));
  } else {
    ASTRAI_RETURN_IF_ERROR(copy_tokenizer(c, o.tokenizer_dir, dir, copied_generation_config));
  }
  if (!o.torch_dtype.empty()) c.torch_dtype = o.torch_dtype;
  ASTRAI_RETURN_IF_ERROR(c.validate());
  ASTRAI_ASSIGN_OR_RETURN(DType dtype, torch_dtype_to_dtype(c.torch_dtype));

  // Weights, grouped into shards in file order.
  std::vector<TensorSpec> all;
  for (auto& [name, shape] : weight_shapes(c)) all.push_back({name, dtype, shape});
  std::vector<std::vector<TensorSpec>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (TensorSpec& t : all) {
    const uint64_t n = t.nbytes();
    if (shard_bytes > 0 && shard_bytes + n > o.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += n;
    total += n;
    shards.back().push_back(std::move(t));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  JsonWriter index;
  index.begin_object().key("metadata").begin_object().key("total_size").value(total).end_object();
  index.key("weight_map").begin_object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(s, shards.size());
    const auto& specs = shards[s];
    ASTRAI_RETURN_IF_ERROR(write_safetensors(
        dir / file, specs,
        [&](size_t i, void* dst, size_t nbytes) {
          fill_init_tensor(c, o, specs[i].name, specs[i].dtype, dst, nbytes / dtype_size(specs[i].dtype));
          return Status{};
        },
        metadata));
    for (const TensorSpec& t : specs) index.key(t.name).value(file);
  }
  index.end_object().end_object();
  if (shards.size() > 1)
    ASTRAI_RETURN_IF_ERROR(write_text(dir / "model.safetensors.index.json", index.str()));

  if (!copied_generation_config)
    ASTRAI_RETURN_IF_ERROR(write_text(dir / "generation_config.json", generation_config_json(c)));
  // config.json last: a directory with a config.json has everything else.
  return write_text(dir / "config.json", c.to_json());
}

Status init_model_dir(std::string_view preset, const fs::path& out, const InitOptions& o) {
  ASTRAI_ASSIGN_OR_RETURN(ModelConfig c, preset_config(preset));
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      return invalid_argument("--out " + out.string() + ": exists and is not a directory");
    if (!fs::is_empty(out, ec))
      return invalid_argument("--out " + out.string() +
                              ": directory exists and is not empty (refusing to overwrite)");
  }
  const fs::path abs = fs::absolute(out, ec);
  const fs::path parent = abs.parent_path();
  fs::create_directories(parent, ec);
  if (ec) return io_error("cannot create " + parent.string() + ": " + ec.message());
  // Unique per process and call, so concurrent inits of the same directory never share a temp dir.
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = parent / ("." + abs.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(counter++));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return io_error("cannot create " + tmp.string() + ": " + ec.message());
  Status s = write_random_model(std::move(c), tmp, o);
  if (s.ok()) {
    // rename(2) replaces an empty directory; a non-empty one (a concurrent init) makes it fail.
    fs::rename(tmp, abs, ec);
    if (ec) s = io_error("cannot move the new model into " + out.string() + ": " + ec.message());
  }
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

}  // namespace astrai
