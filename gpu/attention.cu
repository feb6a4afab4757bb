// KV-cache writes and causal grouped-query attention over a paged cache.
//
// Cache layout: [num_pages * page_size, KVH, D]; logical position j of sequence s lives in slot
// page_table[s][j / page_size] * page_size + j % page_size.
//
// paged_attention (this slice: correct for prefill, extend and decode, not yet fast): one block per
// (query row, head). Each of the block's warps walks every kWarps-th key of the row's causal prefix
// with an online softmax (running max m, sum l, accumulator acc[D] in shared memory, all f32):
//   s_j = scale * q.k_j;  m' = max(m, s_j);  l = l e^(m - m') + e^(s_j - m');
//   acc = acc e^(m - m') + e^(s_j - m') v_j
// and the warps' partial states are merged at the end:
//   out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M),  M = max_w m_w.
// A lane owns dims lane, lane + 32, ... of q.k and of acc, so any head_dim works.
// Lengths are read from device memory (q_start, kv_len, page_table); the host sizes the grid only.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kMaxHeadDim = 1024;

template <typename T>
__global__ void kv_store_kernel(Rows k, Rows v, const int32_t* __restrict__ slots, int64_t kvh, int64_t d,
                                int64_t n_slots, T* __restrict__ k_cache, T* __restrict__ v_cache,
                                int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / d, i = e % d;  // r = token * kvh + head
    const int32_t slot = slots[r / kvh];
    if (slot < 0 || slot >= n_slots) continue;  // validated by the model; never write outside the cache
    const int64_t dst = (int64_t(slot) * kvh + r % kvh) * d + i;
    k_cache[dst] = k.row<T>(r)[i];
    v_cache[dst] = v.row<T>(r)[i];
  }
}

struct AttnParams {
  Rows q, out;
  const int32_t* q_start;
  const int32_t* kv_len;
  const int32_t* page_table;
  int num_seqs, max_pages, page_size;
  int64_t heads, group, kv_heads, head_dim, n_pages;
  float scale;
};

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(AttnParams p, const T* __restrict__ k_cache, const T* __restrict__ v_cache) {
  extern __shared__ float smem[];
  const int64_t D = p.head_dim;
  float* q_s = smem;              // [D]
  float* acc = smem + D;          // [kWarps][D]
  float* m_s = acc + kWarps * D;  // [kWarps]
  float* l_s = m_s + kWarps;      // [kWarps]
  const int64_t row = blockIdx.x, h = blockIdx.y, kvh = h / p.group;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  // The sequence of this row: the last s with q_start[s] <= row (empty sequences are skipped).
  int lo = 0, hi = p.num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.q_start[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  const int s = lo;
  const int64_t q_len = p.q_start[s + 1] - p.q_start[s];
  const int64_t pos = p.kv_len[s] - q_len + (row - p.q_start[s]);
  const int32_t* pages = p.page_table + int64_t(s) * p.max_pages;

  const T* q = p.q.row<T>(row * p.heads + h);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) q_s[i] = to_f32(q[i]);
  float* my_acc = acc + warp * D;
  for (int64_t i = lane; i < D; i += 32) my_acc[i] = 0.0f;
  __syncthreads();

  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j <= pos; j += kWarps) {
    const int64_t pg = j / p.page_size;
    const int32_t page = pg < p.max_pages ? pages[pg] : -1;
    if (page < 0 || page >= p.n_pages) continue;  // validated by the model; never read outside the cache
    const int64_t base = ((int64_t(page) * p.page_size + j % p.page_size) * p.kv_heads + kvh) * D;
    const T* k = k_cache + base;
    float dot = 0.0f;
    for (int64_t i = lane; i < D; i += 32) dot += q_s[i] * to_f32(k[i]);
    const float sj = warp_sum(dot) * p.scale;
    const float m_new = fmaxf(m, sj);
    const float corr = expf(m - m_new), pj = expf(sj - m_new);
    l = l * corr + pj;
    const T* v = v_cache + base;
    for (int64_t i = lane; i < D; i += 32) my_acc[i] = my_acc[i] * corr + pj * to_f32(v[i]);
    m = m_new;
  }
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w]);
  float L = 0.0f, f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    f[w] = l_s[w] > 0.0f ? expf(m_s[w] - M) : 0.0f;
    L += l_s[w] * f[w];
  }
  const float inv = L > 0.0f ? 1.0f / L : __int_as_float(0x7fc00000);
  T* o = p.out.row<T>(row * p.heads + h);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += acc[w * D + i] * f[w];
    o[i] = from_f32<T>(sum * inv);
  }
}

void check_cache(const Tensor& c, const char* op, const char* name, DType dt) {
  check_tensor(c, op, name, dt);
  ASTRAI_GPU_CHECK(
      c.ndim == 3 && c.is_contiguous(),
      std::string(op) + ": " + name + " must be a contiguous [slots, KVH, D], got " + c.shape_str());
}

}  // namespace

void kv_store(cudaStream_t stream, const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
              Tensor v_cache) {
  check_tensor(k, "kv_store", "k", DType::bf16, DType::f32);
  check_tensor(v, "kv_store", "v", k.dtype);
  check_index(slots, "kv_store", "slots");
  check_cache(k_cache, "kv_store", "k_cache", k.dtype);
  check_cache(v_cache, "kv_store", "v_cache", k.dtype);
  ASTRAI_GPU_CHECK(k.ndim == 3 && v.ndim == 3 && k.shape == v.shape,
                   "kv_store: k and v must be [T, KVH, D], same shape");
  const int64_t T = k.shape[0], KVH = k.shape[1], D = k.shape[2];
  ASTRAI_GPU_CHECK(k_cache.shape == v_cache.shape && k_cache.shape[1] == KVH && k_cache.shape[2] == D,
                   "kv_store: cache " + k_cache.shape_str() + " for k " + k.shape_str());
  ASTRAI_GPU_CHECK(slots.numel() == T, "kv_store: slots size differs from T");
  const Rows kv = rows_of(k, "kv_store"), vv = rows_of(v, "kv_store");
  const int64_t n = T * KVH * D;
  if (n == 0) return;
  const int threads = 256;
  if (k.dtype == DType::bf16)
    kv_store_kernel<<<grid_for(n, threads), threads, 0, stream>>>(
        kv, vv, slots.ptr<int32_t>(), KVH, D, k_cache.shape[0], k_cache.ptr<bf16>(), v_cache.ptr<bf16>(), n);
  else
    kv_store_kernel<<<grid_for(n, threads), threads, 0, stream>>>(kv, vv, slots.ptr<int32_t>(), KVH, D,
                                                                  k_cache.shape[0], k_cache.ptr<float>(),
                                                                  v_cache.ptr<float>(), n);
  ASTRAI_CUDA_LAUNCH_CHECK(kv_store_kernel);
}

void paged_attention(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out) {
  check_tensor(q, "paged_attention", "q", DType::bf16, DType::f32);
  check_tensor(out, "paged_attention", "out", q.dtype);
  check_cache(k_cache, "paged_attention", "k_cache", q.dtype);
  check_cache(v_cache, "paged_attention", "v_cache", q.dtype);
  check_index(batch.q_start, "paged_attention", "q_start");
  check_index(batch.kv_len, "paged_attention", "kv_len");
  check_index(batch.page_table, "paged_attention", "page_table");
  ASTRAI_GPU_CHECK(
      q.ndim == 3 && out.ndim == 3 && q.shape == out.shape,
      "paged_attention: q " + q.shape_str() + " and out " + out.shape_str() + " must be [T, H, D]");
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t KVH = k_cache.shape[1], ps = batch.page_size, S = batch.num_seqs;
  ASTRAI_GPU_CHECK(k_cache.shape == v_cache.shape && k_cache.shape[2] == D && KVH > 0 && H % KVH == 0,
                   "paged_attention: cache " + k_cache.shape_str() + " for q " + q.shape_str());
  ASTRAI_GPU_CHECK(ps > 0 && k_cache.shape[0] % ps == 0,
                   "paged_attention: cache slots not a multiple of page_size");
  ASTRAI_GPU_CHECK(batch.q_start.numel() == S + 1 && batch.kv_len.numel() == S &&
                       batch.page_table.numel() >= S * int64_t(batch.max_pages),
                   "paged_attention: q_start/kv_len/page_table sizes do not match num_seqs");
  ASTRAI_GPU_CHECK(D >= 1 && D <= kMaxHeadDim, "paged_attention: head_dim " + std::to_string(D) + " above " +
                                                   std::to_string(kMaxHeadDim));
  ASTRAI_GPU_CHECK(H <= 65535, "paged_attention: more than 65535 heads");
  if (T == 0 || H == 0) return;
  ASTRAI_GPU_CHECK(S >= 1, "paged_attention: tokens but no sequences");
  AttnParams p;
  p.q = rows_of(q, "paged_attention");
  p.out = rows_of(out, "paged_attention");
  p.q_start = batch.q_start.ptr<int32_t>();
  p.kv_len = batch.kv_len.ptr<int32_t>();
  p.page_table = batch.page_table.ptr<int32_t>();
  p.num_seqs = int(S);
  p.max_pages = batch.max_pages;
  p.page_size = int(ps);
  p.heads = H;
  p.group = H / KVH;
  p.kv_heads = KVH;
  p.head_dim = D;
  p.n_pages = k_cache.shape[0] / ps;
  p.scale = scale;
  const dim3 grid{unsigned(T), unsigned(H), 1};
  const size_t smem = size_t((1 + kWarps) * D + 2 * kWarps) * sizeof(float);
  if (q.dtype == DType::bf16)
    paged_attention_kernel<bf16>
        <<<grid, kWarps * 32, smem, stream>>>(p, k_cache.ptr<bf16>(), v_cache.ptr<bf16>());
  else
    paged_attention_kernel<float>
        <<<grid, kWarps * 32, smem, stream>>>(p, k_cache.ptr<float>(), v_cache.ptr<float>());
  ASTRAI_CUDA_LAUNCH_CHECK(paged_attention_kernel);
}

}  // namespace astrai::gpu
