#include "gpu/linear.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "gpu/check.h"
#include "gpu/cublaslt_util.h"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

constexpr int kCandidates = 8;  // heuristic results timed per bucket
constexpr int kTimedRuns = 3;   // timed GEMMs per candidate (after one untimed), each from a cold L2

// Rows of x a tuned algorithm serves: M rounded up to a power of two (prefill chunks of 300 and
// 500 tokens share one pick).
int64_t m_bucket(int64_t m) {
  int64_t b = 1;
  while (b < m) b *= 2;
  return b;
}

// Opt-in (ASTRAI_GEMM_TUNE=1): on the H200 the timed picks made decode at batch 32 slower than the
// heuristic's first choice (llama-1b 0.92x, qwen3-8b 0.96x per step; docs/performance.md), though
// each pick was the fastest GEMM alone, flushed from L2. The heuristic stays the default.
bool tuning_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("ASTRAI_GEMM_TUNE");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// w as linear's ops take it: `dtype` (the activations'), or fp8_e4m3 with bf16 activations and
// scales that cover it.
void check_weight(const Weight& w, const char* op, DType dtype) {
  if (w.dtype != DType::fp8_e4m3 || dtype != DType::bf16) {
    check_tensor(w, op, "w", dtype);
    return;
  }
  check_tensor(w, op, "w", DType::fp8_e4m3);
  check_tensor(w.scale, op, "w's scale", DType::f32);
  const int64_t br = w.block_rows, bc = w.block_cols;
  ASTRAI_GPU_CHECK(w.ndim == 2 && br > 0 && bc > 0 && w.scale.ndim == 2 && w.scale.is_contiguous() &&
                       w.scale.shape[0] == (w.shape[0] + br - 1) / br &&
                       w.scale.shape[1] == (w.shape[1] + bc - 1) / bc,
                   std::string(op) + ": fp8 w " + w.shape_str() + " with scale " + w.scale.shape_str() +
                       " in blocks of " + std::to_string(br) + " x " + std::to_string(bc));
}

}  // namespace

Linear::Linear() {
  ASTRAI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  ASTRAI_CUDA_CHECK(cudaMalloc(&workspace_, kCublasWorkspaceBytes));
  workspace_bytes_ = kCublasWorkspaceBytes;
  ASTRAI_CUDA_CHECK(cudaEventCreate(&start_));
  ASTRAI_CUDA_CHECK(cudaEventCreate(&stop_));
}

Linear::~Linear() {
  for (auto& [key, p] : plans_) {
    cublasLtMatmulDescDestroy(p.op);
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
  }
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// Row-major out[M, N] = x[M, K] w[N, K]^T is, read column-major, D[N, M] = W^T[N, K] X[K, M] with
// W = w as a K x N matrix (ld K, transposed by the GEMM) and X = x as K x M (ld = x's row stride).
const Linear::Plan& Linear::plan(const Key& key, cudaStream_t stream, const void* x, const void* w,
                                 const void* bias, void* dst) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [M, N, K, ldx, ldo, in_t, out_t, has_bias, al_x, al_w, al_o, al_b] = key;
  const cudaDataType_t in = cuda_type(DType(in_t)), out = cuda_type(DType(out_t));
  Plan p;
  ASTRAI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  ASTRAI_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  ASTRAI_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  if (has_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    ASTRAI_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const int32_t bias_t = out;
    ASTRAI_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof(bias_t)));
  }
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in, uint64_t(K), uint64_t(N), K));
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in, uint64_t(K), uint64_t(M), ldx));
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out, uint64_t(N), uint64_t(M), ldo));

  cublasLtMatmulPreference_t pref;
  ASTRAI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t a_al = uint32_t(al_w), b_al = uint32_t(al_x), d_al = uint32_t(al_o);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof(a_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_al, sizeof(b_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d_al, sizeof(d_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_al, sizeof(d_al));
  (void)al_b;  // part of the key: the epilogue reads bias with the alignment it was planned for
  cublasLtMatmulHeuristicResult_t cand[kCandidates]{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d, pref, kCandidates, cand, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    p.fallback = true;
    return plans_.emplace(key, p).first->second;
  }
  p.algo = cand[0].algo;
  Key bucket = key;
  std::get<0>(bucket) = m_bucket(M);
  auto picked = picked_.find(bucket);
  cublasLtMatmulHeuristicResult_t check{};
  if (picked != picked_.end()) {
    // Another M of the bucket was timed: its pick, where it supports this M.
    if (cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.d, p.d, &picked->second, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= workspace_bytes_)
      p.algo = picked->second;
  } else {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    ASTRAI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    // Timing synchronises the stream, which a capture forbids: a shape first seen while capturing
    // keeps the heuristic's choice (the model warms every captured shape up first).
    if (tuning_enabled() && found > 1 && capturing == cudaStreamCaptureStatusNone) {
      if (has_bias)
        ASTRAI_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      p.algo = timed_pick(p, cand, found, stream, x, w, dst);
      picked_.emplace(bucket, p.algo);
    }
  }
  return plans_.emplace(key, p).first->second;
}

cublasLtMatmulAlgo_t Linear::timed_pick(const Plan& p, const cublasLtMatmulHeuristicResult_t* cand, int n,
                                        cudaStream_t stream, const void* x, const void* w, void* out) {
  // In a step the weights come from device memory, not L2 (a model's weights are many times its
  // size), so each timed GEMM runs after a write of twice the L2 evicts them; timed warm, the picks
  // favoured algorithms that only win from L2 (measured on the H200: slower than the heuristic's).
  int dev = 0, l2 = 0;
  ASTRAI_CUDA_CHECK(cudaGetDevice(&dev));
  ASTRAI_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const size_t flush_bytes = 2 * size_t(std::max(l2, 1 << 20));
  void* flush = nullptr;
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // no room to flush: keep the heuristic's choice
    return cand[0].algo;
  }
  const float alpha = 1.0f, beta = 0.0f;
  int best = 0;
  float best_ms = -1.0f;
  for (int i = 0; i < n; ++i) {
    if (cand[i].state != CUBLAS_STATUS_SUCCESS) continue;
    auto launch = [&] {
      return cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &cand[i].algo,
                            workspace_, workspace_bytes_, stream);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that cannot run is not picked
    float total = 0.0f;
    for (int r = 0; r < kTimedRuns; ++r) {
      ASTRAI_CUDA_CHECK(cudaMemsetAsync(flush, r, flush_bytes, stream));
      ASTRAI_CUDA_CHECK(cudaEventRecord(start_, stream));
      ASTRAI_CUBLAS_CHECK(launch());
      ASTRAI_CUDA_CHECK(cudaEventRecord(stop_, stream));
      ASTRAI_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0.0f;
      ASTRAI_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      total += ms;
    }
    if (best_ms < 0.0f || total < best_ms) {
      best = i;
      best_ms = total;
    }
  }
  ASTRAI_CUDA_CHECK(cudaFree(flush));
  return cand[best].algo;
}

void Linear::prepare(const Weight& w) {
  if (w.dtype == DType::fp8_e4m3) widened_.ensure(size_t(w.numel()) * sizeof(uint16_t));
}

Tensor Linear::widen(cudaStream_t stream, const Weight& w) {
  const size_t bytes = size_t(w.numel()) * sizeof(uint16_t);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  ASTRAI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  ASTRAI_GPU_CHECK(capturing == cudaStreamCaptureStatusNone || bytes <= widened_.size(),
                   "linear: an fp8 weight " + w.shape_str() + " was not prepared (Backend::prepare_weight)");
  Tensor wide(widened_.ensure(bytes), DType::bf16, {w.shape[0], w.shape[1]}, Device::cuda);
  dequantize(stream, w, w.scale, w.block_rows, w.block_cols, wide);
  return wide;
}

void Linear::run(cudaStream_t stream, const Tensor& x, const Weight& w, const Tensor* bias, Tensor out,
                 bool gemv_pdl) {
  check_tensor(x, "linear", "x", DType::bf16, DType::f32);
  check_weight(w, "linear", x.dtype);
  check_tensor(out, "linear", "out", DType::bf16, DType::f32);
  ASTRAI_GPU_CHECK(x.dtype == DType::bf16 || out.dtype == DType::f32, "linear: f32 inputs need an f32 out");
  ASTRAI_GPU_CHECK(x.ndim == 2 && w.ndim == 2 && out.ndim == 2, "linear: x, w, out must be 2-D");
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  ASTRAI_GPU_CHECK(w.shape[1] == K && out.shape[0] == M && out.shape[1] == N,
                   "linear: shapes x " + x.shape_str() + " w " + w.shape_str() + " out " + out.shape_str());
  ASTRAI_GPU_CHECK(w.is_contiguous(), "linear: w must be contiguous");
  ASTRAI_GPU_CHECK(x.stride[1] == 1 && out.stride[1] == 1, "linear: x and out need a contiguous last dim");
  if (bias) {
    check_tensor(*bias, "linear", "bias", out.dtype);
    ASTRAI_GPU_CHECK(bias->numel() == N && bias->is_contiguous(),
                     "linear: bias " + bias->shape_str() + " for N = " + std::to_string(N));
  }
  if (M == 0 || N == 0) return;
  ASTRAI_GPU_CHECK(K > 0, "linear: K = 0");
  const int64_t ldx = M > 1 ? x.stride[0] : K, ldo = M > 1 ? out.stride[0] : N;
  ASTRAI_GPU_CHECK(ldx >= K && ldo >= N, "linear: row stride smaller than the width");
  if (linear_gemv(stream, x, w, bias, out, gemv_pdl)) return;  // decode-sized M: our weight-streaming GEMV
  if (w.dtype == DType::fp8_e4m3) {                            // a GEMM: on the widened matrix
    run(stream, x, widen(stream, w), bias, out, gemv_pdl);
    return;
  }
  const Key key{M,
                N,
                K,
                ldx,
                ldo,
                int(x.dtype),
                int(out.dtype),
                bias != nullptr,
                row_alignment(x.data, ldx, x.dtype),
                row_alignment(w.data, K, w.dtype),
                row_alignment(out.data, ldo, out.dtype),
                bias ? row_alignment(bias->data, 0, bias->dtype) : 0};
  const Plan& p = plan(key, stream, x.data, w.data, bias ? bias->data : nullptr, out.data);
  if (p.fallback) {
    linear_fallback(stream, x, w, bias, out);
    return;
  }
  if (bias) {
    const void* bp = bias->data;
    ASTRAI_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  ASTRAI_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w.data, p.a, x.data, p.b, &beta, out.data, p.d,
                                     out.data, p.d, &p.algo, workspace_, workspace_bytes_, stream));
}

void Linear::run_swiglu(cudaStream_t stream, const Tensor& gate, const Tensor& up, const Weight& w,
                        Tensor act, Tensor out) {
  check_tensor(gate, "add_rms_norm_mlp", "gate", DType::bf16, DType::f32);
  check_tensor(up, "add_rms_norm_mlp", "up", gate.dtype);
  check_weight(w, "add_rms_norm_mlp", gate.dtype);
  check_tensor(out, "add_rms_norm_mlp", "out", gate.dtype);
  ASTRAI_GPU_CHECK(gate.ndim == 2 && up.ndim == 2 && gate.shape == up.shape && w.ndim == 2 && out.ndim == 2 &&
                       w.shape[1] == gate.shape[1] && out.shape[0] == gate.shape[0] &&
                       out.shape[1] == w.shape[0],
                   "add_rms_norm_mlp: shapes gate " + gate.shape_str() + " up " + up.shape_str() + " w " +
                       w.shape_str() + " out " + out.shape_str());
  ASTRAI_GPU_CHECK(w.is_contiguous() && gate.stride[1] == 1 && up.stride[1] == 1 && out.stride[1] == 1,
                   "add_rms_norm_mlp: w must be contiguous, gate, up and out need a contiguous last dim");
  if (gate.shape[0] == 0 || w.shape[0] == 0) return;
  ASTRAI_GPU_CHECK(gate.shape[1] > 0, "add_rms_norm_mlp: F = 0");
  if (swiglu_linear_gemv(stream, gate, up, w, out)) return;
  swiglu(stream, gate, up, act);
  run(stream, act, w, nullptr, out);
}

namespace {

// add_rms_norm_linear's operands (and add_rms_norm_mlp's first half, `op`), checked before either
// path runs, so the fused GEMV takes only what the unfused ops accept.
void check_add_norm(const char* op, const Tensor& residual, const Tensor& x, const Tensor& norm_w,
                    const Tensor& residual_out, const Tensor& h, const Weight& w, const Tensor& out) {
  check_tensor(residual, op, "residual", DType::bf16, DType::f32);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &norm_w, &residual_out, &h, &out})
    check_tensor(*t, op, "operand", residual.dtype);
  check_weight(w, op, residual.dtype);
  ASTRAI_GPU_CHECK(residual.ndim == 2 && x.shape == residual.shape && residual_out.shape == residual.shape &&
                       h.shape == residual.shape && w.ndim == 2 && w.shape[1] == residual.shape[1] &&
                       out.ndim == 2 && out.shape[0] == residual.shape[0] && out.shape[1] == w.shape[0] &&
                       norm_w.numel() == residual.shape[1],
                   std::string(op) + ": shapes residual " + residual.shape_str() + " x " + x.shape_str() +
                       " w " + w.shape_str() + " out " + out.shape_str());
}

}  // namespace

void Linear::run_add_norm(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& norm_w,
                          float eps, Tensor residual_out, Tensor h, const Weight& w, const Tensor* bias,
                          Tensor out) {
  check_add_norm("add_rms_norm_linear", residual, x, norm_w, residual_out, h, w, out);
  if (residual.shape[0] == 0) return;
  if (add_rms_norm_linear_gemv(stream, residual, x, norm_w, eps, residual_out, w, bias, out)) return;
  add_rms_norm(stream, residual, x, norm_w, eps, h, &residual_out);
  run(stream, h, w, bias, out);
}

void Linear::run_mlp(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& norm_w,
                     float eps, Tensor residual_out, Tensor h, const Weight& w_gate_up, Tensor gate_up,
                     Tensor act, const Weight& w_down, Tensor out) {
  const char* op = "add_rms_norm_mlp";
  check_add_norm(op, residual, x, norm_w, residual_out, h, w_gate_up, gate_up);
  check_tensor(act, op, "act", residual.dtype);
  const int64_t M = residual.shape[0], F = act.ndim == 2 ? act.shape[1] : 0;
  ASTRAI_GPU_CHECK(act.ndim == 2 && act.shape[0] == M && gate_up.shape[1] == 2 * F,
                   std::string(op) + ": gate_up " + gate_up.shape_str() + " for act " + act.shape_str());
  if (M == 0) return;
  // A long down projection (a 7-8B model's) follows the pairs with a plain launch, and then one row
  // takes the pairs too; see linear.h.
  const bool long_down = int64_t(w_down.nbytes()) >= kLongDownBytes;
  if ((M >= 2 || long_down) &&
      add_rms_norm_linear_swiglu_gemv(stream, residual, x, norm_w, eps, residual_out, h, w_gate_up, act)) {
    run(stream, act, w_down, nullptr, out, !long_down);
    return;
  }
  run_add_norm(stream, residual, x, norm_w, eps, residual_out, h, w_gate_up, nullptr, gate_up);
  run_swiglu(stream, gate_up.cols(0, F), gate_up.cols(F, 2 * F), w_down, act, out);
}

}  // namespace astrai::gpu
