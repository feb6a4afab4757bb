// Row-wise and element-wise ops: embedding lookup, SwiGLU, add, row gather, dtype conversion, fp8
// dequantization; the backward of embedding (scatter-add) and SwiGLU.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"
#include "src/backend/cpu/vec.h"
#include "src/core/float_elements.h"

namespace astrai::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor out) {
  ASTRAI_OP_CHECK(table.dtype == DType::f32 || table.dtype == DType::bf16,
                  "embedding: table must be f32 or bf16, got " + std::string(dtype_name(table.dtype)));
  check_i32(ids, "embedding", "ids");
  check_f32(out, "embedding", "out");
  ASTRAI_OP_CHECK(table.ndim == 2 && table.is_contiguous(), "embedding: table must be a contiguous [V, H]");
  const int64_t V = table.shape[0], H = table.shape[1], T = ids.numel();
  const RowView ov = rows_of(out, "embedding");
  ASTRAI_OP_CHECK(ov.n_rows == T && ov.width == H, "embedding: out " + out.shape_str() + " for " +
                                                       std::to_string(T) + " ids of width " +
                                                       std::to_string(H));
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    ASTRAI_OP_CHECK(id[t] >= 0 && id[t] < V, "embedding: token id " + std::to_string(id[t]) +
                                                 " outside [0, " + std::to_string(V) + ")");
  for (int64_t t = 0; t < T; ++t) {
    if (table.dtype == DType::f32) {
      std::memcpy(ov.row(t), table.ptr<float>() + int64_t(id[t]) * H, size_t(H) * sizeof(float));
    } else {
      widen_bf16(table.ptr<uint16_t>() + int64_t(id[t]) * H, ov.row(t), H);
    }
  }
}

// silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) overflows to inf for g << 0, giving 0.
void swiglu(const Tensor& gate, const Tensor& up, Tensor out) {
  check_f32(gate, "swiglu", "gate");
  check_f32(up, "swiglu", "up");
  check_f32(out, "swiglu", "out");
  const RowView gv = rows_of(gate, "swiglu"), uv = rows_of(up, "swiglu"), ov = rows_of(out, "swiglu");
  ASTRAI_OP_CHECK(
      gv.n_rows == uv.n_rows && gv.n_rows == ov.n_rows && gv.width == uv.width && gv.width == ov.width,
      "swiglu: gate " + gate.shape_str() + " up " + up.shape_str() + " out " + out.shape_str());
  const int64_t F = gv.width;
#pragma omp parallel for schedule(static) if (gv.n_rows * F > (1 << 18))
  for (int64_t r = 0; r < gv.n_rows; ++r) {
    const float* g = gv.row(r);
    const float* u = uv.row(r);
    float* o = ov.row(r);
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

// dtable[ids[t]] += dout[t]. Serial over tokens: a repeated id adds in token order (deterministic),
// and the work is T * H additions, small beside any GEMM of the step.
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor dtable) {
  check_f32(dout, "embedding_backward", "dout");
  check_i32(ids, "embedding_backward", "ids");
  check_f32(dtable, "embedding_backward", "dtable");
  ASTRAI_OP_CHECK(dtable.ndim == 2 && dtable.is_contiguous(),
                  "embedding_backward: dtable must be a contiguous [V, H]");
  const int64_t V = dtable.shape[0], H = dtable.shape[1], T = ids.numel();
  const RowView dv = rows_of(dout, "embedding_backward");
  ASTRAI_OP_CHECK(dv.n_rows == T && dv.width == H, "embedding_backward: dout " + dout.shape_str() + " for " +
                                                       std::to_string(T) + " ids of width " +
                                                       std::to_string(H));
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    ASTRAI_OP_CHECK(id[t] >= 0 && id[t] < V, "embedding_backward: token id " + std::to_string(id[t]) +
                                                 " outside [0, " + std::to_string(V) + ")");
  for (int64_t t = 0; t < T; ++t) {
    const float* g = dv.row(t);
    float* row = dtable.ptr<float>() + int64_t(id[t]) * H;
#pragma omp simd
    for (int64_t i = 0; i < H; ++i) row[i] += g[i];
  }
}

// With s = sigmoid(g): d silu(g) / dg = s + g * s * (1 - s) = s * (1 + g * (1 - s)).
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor dgate, Tensor dup) {
  check_f32(dout, "swiglu_backward", "dout");
  check_f32(gate, "swiglu_backward", "gate");
  check_f32(up, "swiglu_backward", "up");
  check_f32(dgate, "swiglu_backward", "dgate");
  check_f32(dup, "swiglu_backward", "dup");
  const RowView dov = rows_of(dout, "swiglu_backward"), gv = rows_of(gate, "swiglu_backward"),
                uv = rows_of(up, "swiglu_backward"), dgv = rows_of(dgate, "swiglu_backward"),
                duv = rows_of(dup, "swiglu_backward");
  bool same = true;
  for (const RowView* r : {&gv, &uv, &dgv, &duv})
    same = same && r->n_rows == dov.n_rows && r->width == dov.width;
  ASTRAI_OP_CHECK(same, "swiglu_backward: dout " + dout.shape_str() + " gate " + gate.shape_str() + " up " +
                            up.shape_str() + " dgate " + dgate.shape_str() + " dup " + dup.shape_str());
  const int64_t F = dov.width;
#pragma omp parallel for schedule(static) if (dov.n_rows * F > (1 << 18))
  for (int64_t r = 0; r < dov.n_rows; ++r) {
    const float* d = dov.row(r);
    const float* g = gv.row(r);
    const float* u = uv.row(r);
    float* dg = dgv.row(r);
    float* du = duv.row(r);
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-g[i]));
      dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      du[i] = d[i] * g[i] * s;
    }
  }
}

void add(const Tensor& a, const Tensor& b, Tensor out) {
  check_f32(a, "add", "a");
  check_f32(b, "add", "b");
  check_f32(out, "add", "out");
  const RowView av = rows_of(a, "add"), bv = rows_of(b, "add"), ov = rows_of(out, "add");
  ASTRAI_OP_CHECK(
      av.n_rows == bv.n_rows && av.n_rows == ov.n_rows && av.width == bv.width && av.width == ov.width,
      "add: a " + a.shape_str() + " b " + b.shape_str() + " out " + out.shape_str());
  const int64_t d = av.width;
#pragma omp parallel for schedule(static) if (av.n_rows * d > (1 << 18))
  for (int64_t r = 0; r < av.n_rows; ++r) {
    const float* x = av.row(r);
    const float* y = bv.row(r);
    float* o = ov.row(r);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) o[i] = x[i] + y[i];
  }
}

void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) {
  check_i32(rows, "gather_rows", "rows");
  ASTRAI_OP_CHECK(x.dtype == out.dtype, "gather_rows: x and out dtypes differ");
  ASTRAI_OP_CHECK(x.ndim == 2 && out.ndim == 2, "gather_rows: x and out must be 2-D");
  const RowView xv = rows_of(x, "gather_rows"), ov = rows_of(out, "gather_rows");
  const int64_t R = rows.numel();
  ASTRAI_OP_CHECK(
      ov.n_rows == R && ov.width == xv.width,
      "gather_rows: out " + out.shape_str() + " for " + std::to_string(R) + " rows of " + x.shape_str());
  const int32_t* idx = rows.ptr<int32_t>();
  const size_t row_bytes = size_t(xv.width) * xv.esize;
  for (int64_t i = 0; i < R; ++i) {
    ASTRAI_OP_CHECK(idx[i] >= 0 && idx[i] < xv.n_rows, "gather_rows: row " + std::to_string(idx[i]) +
                                                           " outside [0, " + std::to_string(xv.n_rows) + ")");
    std::memcpy(ov.row<char>(i), xv.row<char>(idx[i]), row_bytes);
  }
}

void take_tokens(Tensor ids, const Tensor& moves, const Tensor& draws) {
  if (std::string e = take_tokens_error(ids, moves, draws, Device::cpu); !e.empty())
    throw Error(invalid_argument("take_tokens: " + e));
  const int64_t T = ids.numel(), D = draws.size(0), W = draws.size(1);
  const int32_t* mv = moves.ptr<int32_t>();
  for (int64_t i = 0; i < moves.size(0); ++i) {
    const int32_t row = mv[2 * i], draw = mv[2 * i + 1];
    ASTRAI_OP_CHECK(row >= 0 && row < T && draw >= 0 && draw < D,
                    "take_tokens: move " + std::to_string(i) + " (row " + std::to_string(row) + ", draw " +
                        std::to_string(draw) + ") outside ids [" + std::to_string(T) + "] or draws [" +
                        std::to_string(D) + "]");
    ids.ptr<int32_t>()[row] = draws.ptr<int32_t>()[draw * W];
  }
}

namespace {
inline void store_from_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    default: break;
  }
}
}  // namespace

void convert(const Tensor& src, Tensor dst) {
  ASTRAI_OP_CHECK(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype),
                  "convert: only f32, bf16 and f16 are supported");
  ASTRAI_OP_CHECK(
      src.is_contiguous() && dst.is_contiguous() && src.numel() == dst.numel(),
      "convert: src " + src.shape_str() + " and dst " + dst.shape_str() + " must be contiguous, same size");
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    // A bf16 checkpoint's matrices load through here (the CPU keeps them bf16): a copy in 1 MiB
    // slices over the threads, so fresh pages fault and zero on every core, as the converting loop
    // below does.
    constexpr int64_t kSlice = int64_t(1) << 20;
    const int64_t bytes = int64_t(src.nbytes()), slices = (bytes + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static) if (slices > 4)
    for (int64_t i = 0; i < slices; ++i) {
      const int64_t b = i * kSlice, e = std::min(bytes, b + kSlice);
      std::memcpy(static_cast<char*>(dst.data) + b, static_cast<const char*>(src.data) + b, size_t(e - b));
    }
    return;
  }
  // Weight loading converts whole checkpoints here (bf16 files into f32): the common pair gets a
  // loop the compiler vectorises, the others the general per-element path.
  if (src.dtype == DType::bf16 && dst.dtype == DType::f32) {
    constexpr int64_t kChunk = 65536;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c)
      widen_bf16(static_cast<const uint16_t*>(src.data) + c * kChunk,
                 static_cast<float*>(dst.data) + c * kChunk, std::min(kChunk, n - c * kChunk));
    return;
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst.data, dst.dtype, i, load_as_f32(src.data, src.dtype, i));
}

}  // namespace astrai::cpu

namespace astrai::cpu {

void dequantize(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols, Tensor out) {
  if (std::string e = dequantize_error(q, scale, block_rows, block_cols, out, Device::cpu); !e.empty())
    throw Error(invalid_argument("dequantize: " + e));
  float decode[256];
  for (int b = 0; b < 256; ++b) decode[b] = fp8_e4m3_to_f32(uint8_t(b));
  const int64_t R = q.size(0), C = q.size(1), sc = scale.size(1);
  const auto* in = q.ptr<uint8_t>();
  // A row at a time over the threads (a checkpoint's matrix is thousands of rows); each row reads
  // its ceil(C / block_cols) scales once.
#pragma omp parallel for schedule(static) if (R * C > 65536)
  for (int64_t i = 0; i < R; ++i) {
    const int64_t srow = i / block_rows;
    const uint8_t* qi = in + i * C;
    for (int64_t j0 = 0; j0 < C; j0 += block_cols) {
      const float s = load_as_f32(scale.data, scale.dtype, srow * sc + j0 / block_cols);
      const int64_t j1 = std::min(C, j0 + block_cols);
      if (out.dtype == DType::f32) {
        float* o = out.ptr<float>() + i * C;
        for (int64_t j = j0; j < j1; ++j) o[j] = decode[qi[j]] * s;
      } else {
        for (int64_t j = j0; j < j1; ++j) store_from_f32(out.data, out.dtype, i * C + j, decode[qi[j]] * s);
      }
    }
  }
}

}  // namespace astrai::cpu
