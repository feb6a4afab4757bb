// kv_store + paged_attention against a float64 causal GQA attention over each sequence's logical
// K/V, on every backend, with random non-contiguous page tables and a mix of decode rows (q_len 1),
// partial prefills (chunks after cached tokens) and full prefills in one ragged batch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/op_test_util.h"
#include "src/backend/cpu/ops.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

struct Seq {
  int kv_len = 0, q_len = 0;
};

struct CaseShape {
  int group = 1;
  int max_kv = 90;
  int max_q = 1 << 30;  // longest query run
  int max_d = 160;
  int d = 0;            // head_dim; 0: random in [1, max_d]
  int kv_capacity = 0;  // AttentionBatch::max_kv_len when above the longest sequence (a graph's grid)
  bool decode = false;  // every sequence one query (a decode step)
  int min_seqs = 1, max_seqs = 6;
};

struct BatchShape {
  int kv_heads = 1, group = 1, head_dim = 1, page_size = 16;
  std::vector<Seq> seqs;  // pages are filled in at random
  int checked_rows = 0;   // query rows compared with the reference (0: all), always each sequence's last
  int kv_capacity = 0;    // AttentionBatch::max_kv_len when above the longest sequence (a graph's grid)
  bool decode = false;    // a decode step: q rows mostly at 16-byte strides (see the pad below)
  // A mixed step: AttentionBatch::num_decode_seqs names the leading one-query sequences, and q rows
  // are mostly at 16-byte strides (the CUDA backend's decode and tensor-core kernels split the step).
  bool mixed = false;
};

void run_batch(Backend& be, Rng& rng, BatchShape shape);

void run_case(Backend& be, Rng& rng, const CaseShape& shape) {
  BatchShape b;
  b.group = shape.group;
  // Decode: also 4 and 8 KV heads, which the CUDA decode kernel can take several of in a block.
  b.kv_heads = shape.decode ? std::vector<int>{1, 2, 3, 4, 8}[size_t(rng.randint(0, 4))] : rng.randint(1, 3);
  b.head_dim = shape.d > 0 ? shape.d : rng.randint(1, shape.max_d);
  b.page_size = std::vector<int>{1, 3, 16}[size_t(rng.randint(0, 2))];
  b.kv_capacity = shape.kv_capacity;
  b.decode = shape.decode;
  b.seqs.resize(size_t(rng.randint(shape.min_seqs, shape.max_seqs)));
  for (auto& s : b.seqs) {
    s.kv_len = rng.randint(1, shape.max_kv);
    const int kind =
        shape.decode ? 0 : rng.randint(0, 2);  // 0 decode, 1 chunk after cached tokens, 2 full prefill
    s.q_len = kind == 0 ? 1 : kind == 1 ? rng.randint(1, s.kv_len) : s.kv_len;
    s.q_len = std::min(s.q_len, shape.max_q);
  }
  run_batch(be, rng, std::move(b));
}

// Equal element for element, NaN matching NaN (whatever its payload).
bool same_or_both_nan(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// kv_store + paged_attention over the batch's sequences, against float64 attention.
void run_batch(Backend& be, Rng& rng, BatchShape shape) {
  const DType dt = be.compute_dtype();
  const int group = shape.group, KVH = shape.kv_heads, H = KVH * group, D = shape.head_dim;
  const int ps = shape.page_size;
  std::vector<Seq>& seqs = shape.seqs;
  const int S = int(seqs.size());
  int max_pages = 0, total_pages_needed = 0;
  for (auto& s : seqs) {
    const int need = (s.kv_len + ps - 1) / ps;
    max_pages = std::max(max_pages, need);
    total_pages_needed += need;
  }
  max_pages += rng.randint(0, 2);  // unused tail entries
  const int num_pages = total_pages_needed + rng.randint(0, 10);
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  size_t next = 0;
  std::vector<int32_t> page_table(size_t(S * max_pages), 0), q_start{0}, kv_len;
  for (int s = 0; s < S; ++s) {
    for (int p = 0; p < (seqs[s].kv_len + ps - 1) / ps; ++p) page_table[s * max_pages + p] = perm[next++];
    q_start.push_back(q_start.back() + seqs[s].q_len);
    kv_len.push_back(seqs[s].kv_len);
  }
  const int T = q_start.back();

  // Logical K/V per sequence (rounded to the cache dtype); tokens before the query run are already
  // in the cache, the query run's own K/V go in through kv_store.
  const int64_t slots = int64_t(num_pages) * ps;
  std::vector<float> kc(size_t(slots * KVH * D)), vc(kc.size());
  for (auto& x : kc) x = rng.uniform();
  for (auto& x : vc) x = rng.uniform();
  std::vector<std::vector<float>> K(static_cast<size_t>(S)), V(static_cast<size_t>(S));
  std::vector<float> knew(size_t(T * KVH * D)), vnew(knew.size());
  std::vector<int32_t> new_slots(static_cast<size_t>(T));
  std::vector<char> used(size_t(slots), 0);  // slots some sequence's keys take
  for (int s = 0; s < S; ++s) {
    K[s] = rng.vec(size_t(seqs[s].kv_len) * size_t(KVH) * size_t(D));
    V[s] = rng.vec(K[s].size());
    for (auto& x : K[s]) x = round_to(dt, x);
    for (auto& x : V[s]) x = round_to(dt, x);
    for (int j = 0; j < seqs[s].kv_len; ++j) {
      const int slot = page_table[s * max_pages + j / ps] * ps + j % ps;
      used[size_t(slot)] = 1;
      const int first_new = seqs[s].kv_len - seqs[s].q_len;
      float* kd =
          j < first_new ? &kc[size_t(slot) * KVH * D] : &knew[size_t(q_start[s] + j - first_new) * KVH * D];
      float* vd =
          j < first_new ? &vc[size_t(slot) * KVH * D] : &vnew[size_t(q_start[s] + j - first_new) * KVH * D];
      std::copy_n(&K[s][size_t(j) * KVH * D], KVH * D, kd);
      std::copy_n(&V[s][size_t(j) * KVH * D], KVH * D, vd);
      if (j >= first_new) new_slots[size_t(q_start[s] + j - first_new)] = slot;
    }
  }
  // Slots no sequence's keys use (a last page's tail, the spare pages) hold NaN: a kernel that reads
  // one and weighs it by 0 (a masked key's probability) gives NaN, not the reference.
  for (int64_t sl = 0; sl < slots; ++sl)
    if (!used[size_t(sl)])
      for (int64_t i = 0; i < int64_t(KVH) * D; ++i)
        kc[size_t(sl * KVH * D + i)] = vc[size_t(sl * KVH * D + i)] = std::nanf("");
  // q as a column slice of a wider [T, H*D + pad] buffer.
  // Decode cases: mostly rows at 16-byte strides (the CUDA decode kernel's 16-byte loads), some not
  // (the general kernel takes them).
  const int pad =
      shape.decode || shape.mixed ? (rng.randint(0, 3) == 0 ? 3 : 8 * rng.randint(0, 1)) : rng.randint(0, 5);
  const int64_t ldq = int64_t(H) * D + pad;
  auto qh = rng.vec(size_t(T * ldq), 2.0f);

  auto k_cache = to_device(be, kc, {slots, KVH, D});
  auto v_cache = to_device(be, vc, {slots, KVH, D});
  auto kn = to_device(be, knew, {T, KVH, D});
  auto vn = to_device(be, vnew, {T, KVH, D});
  auto sl = to_device(be, new_slots, {T});
  be.kv_store(kn.t, vn.t, sl.t, k_cache.t, v_cache.t);
  {  // kv_store wrote each new row into its slot and nothing else
    std::vector<float> kwant = kc, vwant = vc;
    for (int t = 0; t < T; ++t) {
      std::copy_n(&knew[size_t(t) * KVH * D], KVH * D, &kwant[size_t(new_slots[t]) * KVH * D]);
      std::copy_n(&vnew[size_t(t) * KVH * D], KVH * D, &vwant[size_t(new_slots[t]) * KVH * D]);
    }
    REQUIRE(same_or_both_nan(to_host(be, k_cache.t), kwant));
    REQUIRE(same_or_both_nan(to_host(be, v_cache.t), vwant));
  }

  auto qbuf = to_device(be, qh, {T, ldq});
  Tensor q(qbuf.t.data, qbuf.t.dtype, {T, H, D}, qbuf.t.device);
  q.stride = {ldq, D, 1, 0};
  auto qs_t = to_device(be, q_start, {S + 1});
  auto kl_t = to_device(be, kv_len, {S});
  auto pt_t = to_device(be, page_table, {S, max_pages});
  AttentionBatch batch{qs_t.t,    kl_t.t, pt_t.t, S,
                       max_pages, ps,     0,      *std::max_element(kv_len.begin(), kv_len.end())};
  for (int s = 0; s < S; ++s) batch.max_q_len = std::max(batch.max_q_len, seqs[s].q_len);
  batch.max_kv_len = std::max(batch.max_kv_len, shape.kv_capacity);
  if (shape.mixed)
    while (batch.num_decode_seqs < S && seqs[size_t(batch.num_decode_seqs)].q_len == 1)
      ++batch.num_decode_seqs;
  auto out = poisoned(be, {T, H, D});
  const float scale = 1.0f / std::sqrt(float(D));
  be.paged_attention(q, k_cache.t, v_cache.t, batch, scale, out.t);
  auto got = to_host(be, out.t);
  if (be.device() == Device::cpu) {  // every instruction-set path gives the baseline's bits
    auto ref = poisoned(be, {T, H, D});
    cpu::paged_attention(q, k_cache.t, v_cache.t, batch, scale, ref.t, cpu::Isa::baseline);
    const auto want_bits = to_host(be, ref.t);
    for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
      if (!cpu::isa_available(isa)) continue;
      auto other = poisoned(be, {T, H, D});
      cpu::paged_attention(q, k_cache.t, v_cache.t, batch, scale, other.t, isa);
      INFO("path " << int(isa) << " D " << D << " page_size " << ps);
      REQUIRE(std::memcmp(to_host(be, other.t).data(), want_bits.data(), want_bits.size() * sizeof(float)) ==
              0);
    }
  }

  // The rows to check: all, or each sequence's last row (the most keys) and a random sample.
  std::vector<int> rows(static_cast<size_t>(T));
  std::iota(rows.begin(), rows.end(), 0);
  if (shape.checked_rows > 0 && shape.checked_rows < T) {
    std::shuffle(rows.begin(), rows.end(), rng.gen);
    rows.resize(size_t(shape.checked_rows));
    for (int s = 0; s < S; ++s) rows.push_back(q_start[s + 1] - 1);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  std::vector<double> want(got.size());
  std::vector<size_t> checked;
  for (int row : rows) {
    const int s = int(std::upper_bound(q_start.begin(), q_start.end(), row) - q_start.begin()) - 1;
    const int i = row - q_start[s];
    {
      const int pos = seqs[s].kv_len - seqs[s].q_len + i;
      for (int h = 0; h < H; ++h) {
        const int kvh = h / group;
        std::vector<double> sc(size_t(pos + 1));
        double m = -1e300;
        for (int j = 0; j <= pos; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e)
            d += double(qh[size_t(row * ldq + h * D + e)]) * K[s][(size_t(j) * KVH + kvh) * D + e];
          sc[j] = d * double(scale);
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - m));
        for (int e = 0; e < D; ++e) {
          double acc = 0;
          for (int j = 0; j <= pos; ++j) acc += sc[j] / sum * V[s][(size_t(j) * KVH + kvh) * D + e];
          want[(size_t(row) * H + h) * D + e] = acc;
          checked.push_back((size_t(row) * H + h) * D + e);
        }
      }
    }
  }
  INFO("S " << S << " T " << T << " H " << H << " KVH " << KVH << " D " << D << " group " << group
            << " page_size " << ps << " max_kv_len " << batch.max_kv_len << " num_decode_seqs "
            << batch.num_decode_seqs << " q pad " << pad);
  // Every row is written, also the ones not compared (the output was poisoned with NaN).
  REQUIRE(std::all_of(got.begin(), got.end(), [](float x) { return std::isfinite(x); }));
  // Outputs are convex combinations of V rows in [-1, 1]: an absolute bound.
  require_close(
      be, got, want, [](size_t) { return 1.0; }, Tol{0, 1e-5}, checked);
}

void attention_gqa(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int group : {1, 2, 4})
    for (int rep = 0; rep < 4; ++rep) run_case(be, rng, CaseShape{group});
}

void attention_long_context(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int group : {1, 4}) run_case(be, rng, CaseShape{group, 2500, 3, 128});
}

// Decode steps (one query per sequence) at the head dims and groups the CUDA backend's decode
// kernel takes (64, 128; 1, 2, 4, 8), short and long contexts, few and many sequences, with the grid
// sized from the step's longest sequence or from a larger capacity (as a CUDA graph's is): many
// splits past the keys.
void attention_decode(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int d : {64, 128})
    for (int group : {1, 2, 4, 8})
      for (int max_kv : {40, 300, 700, 3000}) {
        // On the GPU a few sequences split their keys, and the combine kernel merges the splits:
        // contexts to 512 take up to 8 splits, the others up to 64.
        CaseShape shape{group, max_kv, 1, 160, d};
        shape.decode = true;
        shape.kv_capacity = rng.randint(0, 1) ? (max_kv == 300 ? 512 : 4096) : 0;
        run_case(be, rng, shape);
      }
  // Many sequences (a serving step's batch: the CUDA kernel's blocks without splits, each warp's
  // ring of tiles in flight), contexts shorter and longer than the tiles the ring holds.
  for (int d : {64, 128})
    for (int group : {1, 2, 4, 8}) {
      CaseShape shape{group, 300, 1, 160, d};
      shape.decode = true;
      shape.min_seqs = 40;
      shape.max_seqs = 70;
      shape.kv_capacity = rng.randint(0, 1) ? 4096 : 0;
      run_case(be, rng, shape);
    }
}

// Steps of the shapes that take the CUDA backend's tensor-core path (bf16, head_dim 64, 96, 128,
// 16 or more queries in a sequence): ragged prefills, extends after long cached prefixes with a
// decode row among them, GQA 4:1 and 1:1, page sizes that do and do not divide the key tiles.
void attention_prefill_ragged(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int d : {64, 96, 128})
    for (int group : {4, 1})
      run_batch(be, rng, BatchShape{2, group, d, 16, {{1, 1}, {17, 17}, {333, 333}, {1000, 1000}}, 64});
  // Page sizes the CUDA backend's Hopper kernel reads one a lane (powers of two from 4: up to 32 in a
  // key tile, or one page around the whole tile) and one it looks up key by key (2).
  for (int page_size : {2, 4, 64, 256})
    for (int d : {64, 128})
      run_batch(be, rng, BatchShape{2, 4, d, page_size, {{17, 17}, {333, 333}, {1000, 1000}}, 64});
}

void attention_extend_after_long_prefix(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto seqs = [](int long_kv) { return std::vector<Seq>{{long_kv, 100}, {1017, 17}, {500, 1}, {64, 64}}; };
  for (int d : {64, 128})
    for (int group : {4, 1}) run_batch(be, rng, BatchShape{2, group, d, 16, seqs(4200), 64});
  // A long context at head_dim 128 (24,700 keys; two heads, which keeps compute-sanitizer's racecheck
  // of it to minutes).
  run_batch(be, rng, BatchShape{1, 2, 128, 16, seqs(24700), 64});
  run_batch(be, rng, BatchShape{1, 4, 64, 3, seqs(4200), 64});
  // Pages of 64 and 256 keys (two a 128-key tile; two tiles a page) past the 4,096 keys from which the CUDA
  // backend's head_dim 64 prefill takes its warp-specialized kernel.
  for (int page_size : {64, 256}) run_batch(be, rng, BatchShape{1, 4, 64, page_size, seqs(4200), 64});
}

// Mixed steps (decode rows with prefill and extend chunks, as a serving step that admits a request
// has): the leading decode rows named by num_decode_seqs (the CUDA backend's decode kernel) and the
// rest (its tensor cores, or everything on one kernel when no decode row leads), ragged, in several
// orders, GQA 4:1 and 1:1, head_dim 64 and 128, a grid sized from a capacity as well.
void attention_mixed(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto decodes = [&](int n, int max_kv) {
    std::vector<Seq> v(static_cast<size_t>(n));
    for (auto& s : v) s = {rng.randint(1, max_kv), 1};
    return v;
  };
  auto cat = [](std::vector<std::vector<Seq>> parts) {
    std::vector<Seq> v;
    for (auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  };
  for (int d : {64, 128})
    for (int group : {4, 1}) {
      const int kvh = group == 4 ? 2 : 4;
      const std::vector<std::vector<Seq>> orders = {
          cat({decodes(31, 700), {{400, 128}}}),                             // decodes first, one chunk
          cat({decodes(8, 3000), {{2000, 100}, {17, 17}}, decodes(3, 90)}),  // decodes after the chunks too
          cat({decodes(5, 300), {{600, 5}, {48, 40}}}),                      // a short extend in the tail
          cat({{{64, 64}}, decodes(6, 500)}),                                // no decode row leads
          cat({decodes(1, 20), {{1000, 1000}}}),                             // one decode row, a full prefill
      };
      for (const auto& seqs : orders) {
        BatchShape b{kvh, group, d, std::vector<int>{3, 16}[size_t(rng.randint(0, 1))], seqs, 48};
        b.mixed = true;
        b.kv_capacity = rng.randint(0, 2) == 0 ? 4096 : 0;
        run_batch(be, rng, std::move(b));
      }
    }
}

// Long prompts (8k and 32k), and decode batches of hundreds of long contexts, on the CUDA backend
// only: the CPU backend's f32 loops would take minutes.
void attention_long_cuda(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  run_batch(be, rng, BatchShape{2, 4, 128, 16, {{8192, 8192}}, 48});
  run_batch(be, rng, BatchShape{1, 4, 64, 16, {{32768, 32768}}, 24});
  run_batch(be, rng, BatchShape{1, 1, 128, 16, {{8192 + 512, 512}, {300, 300}}, 48});
  // Decode steps past one wave of the decode kernel's blocks whose longest context reaches
  // gpu::kDecodeLongKeys: 1,000 (head_dim 64) and 600 (128) blocks, a last wave under half full for
  // the 6-8 and 3-4 two-warp blocks a multiprocessor holds, so they take 2-4 splits; their own
  // lengths, and a graph's grid sized from a capacity. (The decode cases above run the four-warp
  // kernel where their blocks fit one wave of it, as at small batches.)
  for (auto [d, n] : {std::pair{64, 250}, std::pair{128, 150}})
    for (int capacity : {0, 8192}) {
      std::vector<Seq> seqs(static_cast<size_t>(n));
      for (auto& q : seqs) q = {rng.randint(1, 2300), 1};
      seqs[0].kv_len = 2100;
      BatchShape b{4, 4, d, 16, seqs, 64};
      b.decode = true;
      b.kv_capacity = capacity;
      run_batch(be, rng, std::move(b));
    }
}

void attention_rejects_shapes(Backend& be) {
  auto k = zeros(be, {32, 1, 4}), v = zeros(be, {32, 1, 4});
  auto q = zeros(be, {1, 3, 4}), out = zeros(be, {1, 3, 4});  // 3 heads over 2 KV heads: no
  auto k2 = zeros(be, {32, 2, 4}), v2 = zeros(be, {32, 2, 4});
  auto qs = to_device(be, std::vector<int32_t>{0, 1}, {2});
  auto kl = to_device(be, std::vector<int32_t>{5}, {1});
  auto pt = to_device(be, std::vector<int32_t>{0}, {1, 1});
  AttentionBatch batch{qs.t, kl.t, pt.t, 1, 1, 16, 1, 5};
  REQUIRE_THROWS_AS(be.paged_attention(q.t, k2.t, v2.t, batch, 0.5f, out.t), Error);
  auto q4 = zeros(be, {1, 1, 8}), out4 = zeros(be, {1, 1, 8});  // head_dim 8 over a cache of 4
  REQUIRE_THROWS_AS(be.paged_attention(q4.t, k.t, v.t, batch, 0.5f, out4.t), Error);
}

}  // namespace

ASTRAI_BACKEND_TEST("paged_attention matches float64 causal attention for GQA ratios 1, 2, 4", attention_gqa)
ASTRAI_BACKEND_TEST("paged_attention matches float64 attention for short query runs over long contexts",
                    attention_long_context)
ASTRAI_BACKEND_TEST(
    "paged_attention matches float64 attention in decode steps at head_dim 64 and 128, groups 1-8",
    attention_decode)
ASTRAI_BACKEND_TEST("paged_attention matches float64 attention for ragged prefill batches",
                    attention_prefill_ragged)
ASTRAI_BACKEND_TEST("paged_attention matches float64 attention for extends after long cached prefixes",
                    attention_extend_after_long_prefix)
ASTRAI_BACKEND_TEST("paged_attention matches float64 attention in mixed decode and prefill steps, any order",
                    attention_mixed)
ASTRAI_BACKEND_TEST("paged_attention rejects mismatched head counts and head dims", attention_rejects_shapes)

TEST_CASE("paged_attention matches float64 attention for 8k and 32k prompts and long decode batches (cuda)",
          "[gpu]") {
  auto be = gpu_backend();
  if (!be) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  attention_long_cuda(*be);
}

// The CPU's promise (src/backend/cpu/attention.cpp): a row's output bits do not depend on the rows
// it shares a step with. One sequence of L tokens as a whole prefill, as an extend of its last
// L - c rows over c cached ones (blocks of 16 rows then start elsewhere), and its last row as a
// decode step, each beside another sequence; the rows agree bit for bit.
TEST_CASE("paged_attention on the cpu gives a row the same bits in a prefill, an extend and a decode step",
          "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  for (int round = 0; round < 4; ++round) {
    const int KVH = rng.randint(1, 2), group = rng.randint(1, 3), H = KVH * group, D = rng.randint(1, 80);
    const int ps = std::vector<int>{1, 3, 16}[size_t(rng.randint(0, 2))];
    const int L = rng.randint(2, 70), other = rng.randint(1, 40), c = rng.randint(1, L - 1);
    const int pages_l = (L + ps - 1) / ps, pages_o = (other + ps - 1) / ps,
              max_pages = std::max(pages_l, pages_o);
    const int64_t slots = int64_t(pages_l + pages_o) * ps;
    // Sequence 0 (the one compared) on pages [0, pages_l), the other on the next ones; the cache
    // holds both sequences' K/V already (what kv_store would have written).
    auto kc = rng.vec(size_t(slots * KVH * D)), vc = rng.vec(kc.size());
    auto qh = rng.vec(size_t(L + other) * size_t(H) * size_t(D), 2.0f);
    std::vector<int32_t> table(size_t(2 * max_pages), 0);
    for (int p = 0; p < pages_l; ++p) table[size_t(p)] = p;
    for (int p = 0; p < pages_o; ++p) table[size_t(max_pages) + size_t(p)] = pages_l + p;
    auto k_cache = to_device(*be, kc, {slots, KVH, D}), v_cache = to_device(*be, vc, {slots, KVH, D});
    auto pt = to_device(*be, table, {2, max_pages});
    // Sequence 0's query rows [first, L), then the other's whole prefill; the output rows of
    // sequence 0.
    auto run = [&](int first) {
      const int q0 = L - first, T = q0 + other;
      std::vector<float> q(size_t(T * H * D));
      std::copy_n(qh.begin() + ptrdiff_t(first) * H * D, q0 * H * D, q.begin());
      std::copy_n(qh.begin() + ptrdiff_t(L) * H * D, other * H * D, q.begin() + ptrdiff_t(q0) * H * D);
      auto qt = to_device(*be, q, {T, H, D});
      auto qs = to_device(*be, std::vector<int32_t>{0, q0, T}, {3});
      auto kl = to_device(*be, std::vector<int32_t>{L, other}, {2});
      AttentionBatch batch{qs.t, kl.t, pt.t, 2, max_pages, ps, std::max(q0, other), std::max(L, other)};
      auto out = poisoned(*be, {T, H, D});
      be->paged_attention(qt.t, k_cache.t, v_cache.t, batch, 0.125f, out.t);
      auto all = to_host(*be, out.t);
      return std::vector<float>(all.begin(), all.begin() + ptrdiff_t(q0) * H * D);
    };
    const auto whole = run(0), extend = run(c), decode = run(L - 1);
    INFO("L " << L << " c " << c << " other " << other << " KVH " << KVH << " group " << group << " D " << D
              << " page_size " << ps);
    const size_t row = size_t(H) * D;
    REQUIRE(std::memcmp(extend.data(), whole.data() + size_t(c) * row, extend.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(decode.data(), whole.data() + size_t(L - 1) * row, row * sizeof(float)) == 0);
  }
}

TEST_CASE("paged_attention rejects a page table entry outside the cache", "[unit]") {
  auto be = cpu_backend();
  auto k = zeros(*be, {32, 1, 4}), v = zeros(*be, {32, 1, 4});
  auto q = zeros(*be, {1, 1, 4}), out = zeros(*be, {1, 1, 4});
  auto qs = to_device(*be, std::vector<int32_t>{0, 1}, {2});
  auto kl = to_device(*be, std::vector<int32_t>{5}, {1});
  auto pt = to_device(*be, std::vector<int32_t>{2}, {1, 1});  // 32 slots / 16 = pages 0..1
  AttentionBatch batch{qs.t, kl.t, pt.t, 1, 1, 16, 1, 5};
  REQUIRE_THROWS_AS(be->paged_attention(q.t, k.t, v.t, batch, 0.5f, out.t), Error);
}

TEST_CASE("make_backend for cuda without a usable CUDA backend is a clear error", "[unit]") {
  if (has_backend_factory(Device::cuda)) return;  // a CUDA build on a GPU machine answers with its backend
  auto r = make_backend(BackendOptions{Device::cuda, 0, 0});
  REQUIRE_FALSE(r.ok());
  REQUIRE_THAT(r.status().message(), Catch::Contains("cuda"));
}

}  // namespace astrai::test
