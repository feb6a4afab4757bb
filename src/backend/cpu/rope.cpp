// Rotary embedding, Hugging Face rotate-half form: with c = cos(pos * f_i), s = sin(pos * f_i),
//   y[i]       = x[i] * c - x[i + D/2] * s
//   y[i + D/2] = x[i + D/2] * c + x[i] * s          for i < D/2.
// rope_backward applies the transpose, the rotation by -theta (s -> -s).
#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

template <bool kInverse>
void rotate(Tensor x, const Tensor& positions, const Tensor& cos_sin, const char* op) {
  const std::string name = op;
  check_f32(x, op, "x");
  check_i32(positions, op, "positions");
  check_f32(cos_sin, op, "cos_sin");
  ASTRAI_OP_CHECK(x.ndim == 3, name + ": x must be [T, heads, D], got " + x.shape_str());
  const int64_t T = x.shape[0], H = x.shape[1], D = x.shape[2], half = D / 2;
  ASTRAI_OP_CHECK(D % 2 == 0 && cos_sin.ndim == 2 && cos_sin.shape[1] == D && cos_sin.is_contiguous(),
                  name + ": cos_sin " + cos_sin.shape_str() + " for head_dim " + std::to_string(D));
  ASTRAI_OP_CHECK(positions.numel() == T, name + ": positions size differs from T");
  const RowView xv = rows_of(x, op);
  const int32_t* pos = positions.ptr<int32_t>();
  const int64_t max_pos = cos_sin.shape[0];
  for (int64_t t = 0; t < T; ++t)
    ASTRAI_OP_CHECK(pos[t] >= 0 && pos[t] < max_pos, name + ": position " + std::to_string(pos[t]) +
                                                         " outside the table of " + std::to_string(max_pos));
#pragma omp parallel for schedule(static) if (T * H * D > (1 << 18))
  for (int64_t r = 0; r < T * H; ++r) {
    const float* cs = cos_sin.ptr<float>() + int64_t(pos[r / H]) * D;
    const float* c = cs;
    const float* s = cs + half;
    float* a = xv.row(r);
    float* b = a + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = a[i], x2 = b[i], si = kInverse ? -s[i] : s[i];
      a[i] = x1 * c[i] - x2 * si;
      b[i] = x2 * c[i] + x1 * si;
    }
  }
}

}  // namespace

void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin) {
  rotate<false>(x, positions, cos_sin, "rope");
}

void rope_backward(Tensor dx, const Tensor& positions, const Tensor& cos_sin) {
  rotate<true>(dx, positions, cos_sin, "rope_backward");
}

}  // namespace astrai::cpu
