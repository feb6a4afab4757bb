#include "tools/model_dirs.h"

#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <numeric>

#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/model_init.h"
#include "tools/test_util.h"

namespace astrai::test {

std::filesystem::path model_dir(const std::string& which) {
  static std::mutex mu;
  static TempDir root("sched-models");
  static std::map<std::string, std::filesystem::path> made;
  std::lock_guard g(mu);
  if (auto it = made.find(which); it != made.end()) return it->second;
  const auto dir = root / which;
  InitOptions io;
  io.seed = 1234;
  io.norm_jitter = 0.1f;
  if (which == "tiny") {
    check(init_model_dir("tiny", dir, io));
  } else if (which == "qwen3-tiny") {
    ModelConfig c = preset_config("tiny").value();
    c.architecture = "Qwen3ForCausalLM";
    c.model_type = "qwen3";
    c.qk_norm = true;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 48;  // != hidden / heads = 32
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6;
    std::filesystem::create_directories(dir);
    check(write_random_model(c, dir, io));
  } else {
    FAIL("unknown test model " << which);
  }
  made[which] = dir;
  return dir;
}

LoadedModel load_model(const std::filesystem::path& dir) {
  LoadedModel lm;
  BackendOptions bo;
  bo.device = Device::cpu;
  bo.threads = 1;  // tiny models: a fork/join per op costs more than it saves on a shared machine
  lm.backend = make_backend(bo).value();
  lm.model = Model::load(dir, *lm.backend).value();
  return lm;
}

std::vector<int32_t> full_forward_greedy(Model& model, std::vector<int32_t> tokens, int max_tokens,
                                         const std::vector<int32_t>& stop_ids) {
  std::vector<int32_t> out;
  const int ps = 16;
  const int64_t V = model.config().vocab_size;
  for (int step = 0; step < max_tokens; ++step) {
    const int L = int(tokens.size());
    const int pages = (L + ps - 1) / ps;
    KvCache kv = model.allocate_kv(pages, ps);
    std::vector<int32_t> page_ids(static_cast<size_t>(pages));
    std::iota(page_ids.begin(), page_ids.end(), 0);
    ForwardBatchBuilder b(ps);
    b.add_sequence(tokens, 0, L, page_ids, LogitRows::last);
    Tensor logits = model.forward(b.finish(), kv).value();
    std::vector<float> host(static_cast<size_t>(V));
    if (logits.device == Device::cpu) {
      std::copy(logits.ptr<float>(), logits.ptr<float>() + V, host.begin());
    } else {
      model.backend().download(host.data(), logits);
    }
    const int32_t t = int32_t(std::max_element(host.begin(), host.end()) - host.begin());
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
    out.push_back(t);
    tokens.push_back(t);
  }
  return out;
}

}  // namespace astrai::test
