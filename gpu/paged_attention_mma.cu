// paged_attention on tensor cores for prefill and extend steps: the backend's entry to the paged
// instance of train_attention_mma.cuh's forward kernel (PagedKv: ragged sequences, K/V read from the
// paged cache through the page table, each sequence's queries causal at the end of its keys), and on
// an sm_90a build running on Hopper, for head_dim 64 and 128, to attention_wgmma.cuh's kernels of
// the same arithmetic on warpgroup MMA (ASTRAI_PREFILL_ATTENTION=mma keeps mma.sync, to compare).
// For bf16 with head_dim 64, 96 or 128 and 16-byte aligned q/out rows; attention.cu keeps decode,
// small extends, f32 and the other head dims. Lengths come from device memory; the grid is sized
// from AttentionBatch::max_q_len (a bound), so a step replays whatever its lengths.
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gpu/attention_wgmma.cuh"
#include "gpu/check.h"
#include "gpu/ops.h"
#include "gpu/rows.h"
#include "gpu/train_attention_mma.cuh"

namespace astrai::gpu {

namespace {
// Which kernel prefill and extend steps of head_dim 64 or 128 go to: the wgmma kernels where the
// build has them for this device, unless ASTRAI_PREFILL_ATTENTION=mma (mma.sync) or =wgmma-plain
// (the wgmma kernel without a producer warpgroup at every length), to compare.
enum class Prefill { mma, wgmma_plain, wgmma };
Prefill prefill_kernel() {
  static const std::string choice = [] {
    const char* e = std::getenv("ASTRAI_PREFILL_ATTENTION");
    return std::string(e != nullptr ? e : "");
  }();
  if (choice == "mma" || !attention_wgmma::built_for_current_device()) return Prefill::mma;
  return choice == "wgmma-plain" ? Prefill::wgmma_plain : Prefill::wgmma;
}
}  // namespace

void probe_paged_attention() {
  (void)attention_wgmma::built_for_current_device();
}

bool paged_attention_mma(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionBatch& batch, float scale, Tensor out, int sm_count) {
  namespace am = attention_mma;
  const int64_t D = q.shape[2];
  if (q.dtype != DType::bf16 || (D != 64 && D != 96 && D != 128)) return false;
  const Rows qv = rows_of(q, "paged_attention"), ov = rows_of(out, "paged_attention");
  const int64_t H = q.shape[1], KVH = k_cache.shape[1];
  // The kernel addresses row (t, head) as t * s_outer + head * s_inner with 16-byte loads.
  if (!rows_aligned16(qv) || !rows_aligned16(ov) || qv.inner != H || ov.inner != H) return false;
  if (reinterpret_cast<uintptr_t>(k_cache.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(v_cache.data) % 16 != 0)
    return false;
  am::Geo g;
  g.heads = int(H);
  g.kv_heads = int(KVH);
  g.group = int(H / KVH);
  g.scale = scale;
  g.scale_log2 = scale * kLog2e;
  am::PagedKv kv;
  kv.k_cache = k_cache.ptr<bf16>();
  kv.v_cache = v_cache.ptr<bf16>();
  kv.q_start = batch.q_start.ptr<int32_t>();
  kv.kv_len = batch.kv_len.ptr<int32_t>();
  kv.page_table = batch.page_table.ptr<int32_t>();
  kv.max_pages = batch.max_pages;
  kv.page_size = batch.page_size;
  kv.page_shift =
      std::has_single_bit(unsigned(batch.page_size)) ? std::countr_zero(unsigned(batch.page_size)) : -1;
  kv.kv_heads = int(KVH);
  kv.n_pages = k_cache.shape[0] / batch.page_size;
  const int64_t max_q = batch.max_q_len;
  if (max_q > 65535 * 64) return false;  // query tiles (of 64 rows or more) on the grid's y
  namespace aw = attention_wgmma;
  const Prefill kind = D != 96 ? prefill_kernel() : Prefill::mma;
  const bool wg = kind != Prefill::mma, ws = kind == Prefill::wgmma;
  const int64_t max_kv = batch.max_kv_len;
  const cudaError_t err =
      wg && D == 64 ? aw::paged_forward<64>(stream, qv, kv, batch.num_seqs, max_q, max_kv, g, ov, ws)
      : wg          ? aw::paged_forward<128>(stream, qv, kv, batch.num_seqs, max_q, max_kv, g, ov, ws)
      : D == 64     ? am::paged_forward<64>(stream, qv, kv, batch.num_seqs, max_q, g, ov, sm_count)
      : D == 96     ? am::paged_forward<96>(stream, qv, kv, batch.num_seqs, max_q, g, ov, sm_count)
                    : am::paged_forward<128>(stream, qv, kv, batch.num_seqs, max_q, g, ov, sm_count);
  ASTRAI_CUDA_CHECK(err);
  return true;
}

}  // namespace astrai::gpu
