// The Backend training ops on the CPU against float64 references on fresh random inputs: forwards
// against float64 loops, backwards against central differences of a float64 forward (step 1e-5:
// the difference error is about 1e-10, far below the f32 rounding the tolerances allow).
// Tolerances are per element, |got - want| <= 1e-4 * scale + 1e-5 with scale the magnitude the
// op's f32 rounding grows with. Inputs are strided column slices where the model passes slices.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "backend/op_test_util.h"
#include "src/backend/cpu/ops.h"
#include "src/core/status.h"
#include "tools/test_util.h"
#include "train/train_model.h"

namespace astrai::test {
namespace {

using Vec = std::vector<double>;

// d f / d x_i by central differences, for every i.
Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec x) {
  constexpr double h = 1e-5;
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

Vec widen(const std::vector<float>& v) {
  return Vec(v.begin(), v.end());
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Every element within rtol * (|want| + scale) + atol; scale: the typical magnitude of the values.
void require_near(const std::vector<float>& got, const Vec& want, double scale, double rtol = 1e-4,
                  double atol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " got " << got[i] << " want " << want[i]);
    REQUIRE(std::abs(double(got[i]) - want[i]) <= rtol * (std::abs(want[i]) + scale) + atol);
  }
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// A [rows, width] view at column `col` of a [rows, ld] buffer.
Tensor slice(const DeviceTensor& d, int64_t rows, int64_t ld, int64_t col, int64_t width) {
  Tensor t(offset(d.t, col), DType::f32, {rows, width});
  t.stride = {ld, 1, 0, 0};
  return t;
}

// Elements [col, col + width) of each row of a host [rows, ld] buffer.
std::vector<float> host_slice(const std::vector<float>& v, int64_t rows, int64_t ld, int64_t col,
                              int64_t width) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), v.begin() + long(r * ld + col), v.begin() + long(r * ld + col + width));
  return out;
}

}  // namespace

TEST_CASE("gemm computes alpha * op(A) op(B) + beta * C for every transpose pair", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int trial = 0; trial < 8; ++trial) {
    const bool ta = trial & 1, tb = trial & 2;
    // Trials 4..7 are large enough to split over threads.
    const int64_t M = trial >= 4 ? rng.randint(100, 160) : rng.randint(1, 20);
    const int64_t N = trial >= 4 ? rng.randint(100, 160) : rng.randint(1, 20);
    const int64_t K = trial >= 4 ? rng.randint(60, 120) : rng.randint(1, 20);
    const float alpha = rng.uniform(-2, 2), beta = trial % 3 == 0 ? 0.0f : rng.uniform(-1, 1);
    INFO("trans_a " << ta << " trans_b " << tb << " M " << M << " N " << N << " K " << K);
    const int64_t ldc = N + rng.randint(0, 5);
    auto ah = rng.vec(size_t(M * K)), bh = rng.vec(size_t(K * N)), ch = rng.vec(size_t(M * ldc));
    auto a = to_device(*be, ah, {ta ? K : M, ta ? M : K});
    auto b = to_device(*be, bh, {tb ? N : K, tb ? K : N});
    auto c = to_device(*be, ch, {M, ldc});
    be->gemm(a.t, ta, b.t, tb, alpha, beta, slice(c, M, ldc, 0, N));
    const auto got = to_host(*be, c.t);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < ldc; ++n) {
        if (n >= N) {
          REQUIRE(got[m * ldc + n] == ch[m * ldc + n]);  // outside the slice: untouched
          continue;
        }
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? ah[k * M + m] : ah[m * K + k], bv = tb ? bh[n * K + k] : bh[k * N + n];
          s += av * bv;
          mag += std::abs(av * bv);
        }
        const double want = alpha * s + (beta == 0.0f ? 0.0 : beta * ch[m * ldc + n]);
        INFO("c[" << m << ", " << n << "]");
        REQUIRE(std::abs(got[m * ldc + n] - want) <= 1e-5 * (std::abs(alpha) * mag + 1));
      }
  }
}

TEST_CASE("linear_backward gives dx = dy W, adds dy^T x to dW and the column sums of dy to dbias", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t M = rng.randint(1, 70), N = rng.randint(1, 50), K = rng.randint(1, 60);
  const int64_t ldy = N + rng.randint(0, 4);  // dy a column slice, as the fused dqkv buffer's
  auto dyh = rng.vec(size_t(M * ldy)), xh = rng.vec(size_t(M * K)), wh = rng.vec(size_t(N * K));
  auto dw0 = rng.vec(size_t(N * K)), db0 = rng.vec(size_t(N));
  auto dy = to_device(*be, dyh, {M, ldy});
  auto x = to_device(*be, xh, {M, K}), w = to_device(*be, wh, {N, K});
  auto dw = to_device(*be, dw0, {N, K}), db = to_device(*be, db0, {N});
  auto dx = poisoned(*be, {M, K});
  be->linear_backward(slice(dy, M, ldy, 0, N), x.t, w.t, &dx.t, dw.t, &db.t);
  // Reference: the gradient of L = sum(dy * (x W^T + b)) by central differences.
  const auto dys = widen(host_slice(dyh, M, ldy, 0, N));
  auto loss = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    double s = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double y = bv[n];
        for (int64_t k = 0; k < K; ++k) y += xv[m * K + k] * wv[n * K + k];
        s += dys[m * N + n] * y;
      }
    return s;
  };
  const Vec xd = widen(xh), wd = widen(wh), bd(size_t(N), 0.0);
  const Vec gx = numeric_grad([&](const Vec& v) { return loss(v, wd, bd); }, xd);
  Vec gw = numeric_grad([&](const Vec& v) { return loss(xd, v, bd); }, wd);
  Vec gb = numeric_grad([&](const Vec& v) { return loss(xd, wd, v); }, bd);
  for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw0[i];
  for (size_t i = 0; i < gb.size(); ++i) gb[i] += db0[i];
  require_near(to_host(*be, dx.t), gx, double(N));
  require_near(to_host(*be, dw.t), gw, double(M));
  require_near(to_host(*be, db.t), gb, double(M));
}

TEST_CASE("rms_norm_train saves rstd; rms_norm_backward matches central differences (per token and per head)",
          "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (const bool per_head : {false, true}) {
    // Per head: x [T, heads, D] a column slice of a wider buffer, as q inside qkv.
    const int64_t T = rng.randint(1, 12), heads = per_head ? rng.randint(1, 4) : 1, D = rng.randint(2, 40);
    const int64_t ld = heads * D + (per_head ? rng.randint(0, 9) : 0), R = T * heads;
    const float eps = 1e-5f;
    INFO("per_head " << per_head << " T " << T << " heads " << heads << " D " << D);
    auto xh = rng.vec(size_t(T * ld)), wh = rng.vec(size_t(D)), dyh = rng.vec(size_t(R * D));
    for (auto& v : wh) v += 1.0f;
    auto dx0 = rng.vec(size_t(R * D)), dw0 = rng.vec(size_t(D));
    auto x = to_device(*be, xh, {T, ld});
    auto w = to_device(*be, wh, {D}), dy = to_device(*be, dyh, {T, heads, D});
    Tensor xv(x.t.data, DType::f32, {T, heads, D});
    xv.stride = {ld, D, 1, 0};
    auto out = poisoned(*be, {T, heads, D}), rstd = poisoned(*be, {R});
    be->rms_norm_train(xv, w.t, eps, out.t, rstd.t);

    const Vec xs = widen(host_slice(xh, T, ld, 0, heads * D)), wd = widen(wh), dyd = widen(dyh);
    auto forward = [&](const Vec& xin, const Vec& win, Vec* y, Vec* rs) {
      for (int64_t r = 0; r < R; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += xin[r * D + i] * xin[r * D + i];
        const double inv = 1 / std::sqrt(ss / double(D) + eps);
        if (rs) (*rs)[r] = inv;
        for (int64_t i = 0; i < D; ++i) (*y)[r * D + i] = xin[r * D + i] * inv * win[i];
      }
    };
    Vec y(static_cast<size_t>(R * D)), rs(static_cast<size_t>(R));
    forward(xs, wd, &y, &rs);
    require_near(to_host(*be, out.t), y, 1.0, 1e-5);
    require_near(to_host(*be, rstd.t), rs, 0.0, 1e-5);

    auto loss = [&](const Vec& xin, const Vec& win) {
      Vec yy(size_t(R * D));
      forward(xin, win, &yy, nullptr);
      return dot(yy, dyd);
    };
    const Vec gx = numeric_grad([&](const Vec& v) { return loss(v, wd); }, xs);
    Vec gw = numeric_grad([&](const Vec& v) { return loss(xs, v); }, wd);
    for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw0[i];
    for (const bool accumulate : {false, true}) {
      INFO("accumulate " << accumulate);
      auto dx = to_device(*be, dx0, {T, heads, D});
      auto dw = to_device(*be, dw0, {D});
      be->rms_norm_backward(dy.t, xv, w.t, rstd.t, dx.t, dw.t, accumulate);
      Vec want = gx;
      if (accumulate)
        for (size_t i = 0; i < want.size(); ++i) want[i] += dx0[i];
      require_near(to_host(*be, dx.t), want, max_abs(gx));
      require_near(to_host(*be, dw.t), gw, double(R));
    }
    // In place over dy (the q/k norm backward): the same dx.
    auto dy2 = to_device(*be, dyh, {T, heads, D});
    auto dw = to_device(*be, dw0, {D});
    be->rms_norm_backward(dy2.t, xv, w.t, rstd.t, dy2.t, dw.t, false);
    require_near(to_host(*be, dy2.t), gx, max_abs(gx));
  }
}

TEST_CASE("embedding_backward scatter-adds rows into the table, repeated ids summed", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t V = rng.randint(1, 12), H = rng.randint(1, 40), T = rng.randint(1, 50);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& i : ids) i = rng.randint(0, int(V) - 1);  // few ids: many repeats
  auto douth = rng.vec(size_t(T * H)), t0 = rng.vec(size_t(V * H));
  auto dout = to_device(*be, douth, {T, H});
  auto idt = to_device(*be, ids, {T});
  auto table = to_device(*be, t0, {V, H});
  be->embedding_backward(dout.t, idt.t, table.t);
  Vec want = widen(t0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) want[size_t(ids[size_t(t)] * H + i)] += douth[size_t(t * H + i)];
  require_near(to_host(*be, table.t), want, double(T), 1e-6);

  std::vector<int32_t> bad{int32_t(V)};
  auto badt = to_device(*be, bad, {1});
  REQUIRE_THROWS_WITH(be->embedding_backward(dout.t.rows(0, 1), badt.t, table.t),
                      Catch::Contains("outside [0, " + std::to_string(V) + ")"));
}

TEST_CASE("rope_backward is the transpose of rope (central differences of sum(dy * rope(x)))", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t T = rng.randint(1, 10), H = rng.randint(1, 4), D = 2 * rng.randint(1, 12), max_pos = 64;
  const int64_t ld = H * D + rng.randint(0, 7);
  std::vector<float> cs(size_t(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ang = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs[size_t(p * D + i)] = float(std::cos(ang));
      cs[size_t(p * D + D / 2 + i)] = float(std::sin(ang));
    }
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (auto& p : pos) p = rng.randint(0, int(max_pos) - 1);
  auto dyh = rng.vec(size_t(T * ld));
  auto dy = to_device(*be, dyh, {T, ld});
  auto table = to_device(*be, cs, {max_pos, D});
  auto positions = to_device(*be, pos, {T});
  Tensor dv(dy.t.data, DType::f32, {T, H, D});
  dv.stride = {ld, D, 1, 0};
  be->rope_backward(dv, positions.t, table.t);

  const Vec dys = widen(host_slice(dyh, T, ld, 0, H * D));
  auto loss = [&](const Vec& x) {
    double s = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double c = cs[size_t(pos[size_t(t)] * D + i)],
                       sn = cs[size_t(pos[size_t(t)] * D + D / 2 + i)];
          const size_t a = size_t((t * H + h) * D + i), b = a + size_t(D / 2);
          s += dys[a] * (x[a] * c - x[b] * sn) + dys[b] * (x[b] * c + x[a] * sn);
        }
    return s;
  };
  const Vec want = numeric_grad(loss, Vec(size_t(T * H * D), 0.3));
  const auto got = to_host(*be, dy.t);
  require_near(host_slice(got, T, ld, 0, H * D), want, 1.0, 1e-5);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = H * D; i < ld; ++i) REQUIRE(got[size_t(t * ld + i)] == dyh[size_t(t * ld + i)]);
}

TEST_CASE("swiglu_backward matches central differences of sum(dout * silu(gate) * up)", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t T = rng.randint(1, 12), F = rng.randint(1, 30);
  // gate | up are the two halves of one [T, 2F] buffer, and so are dgate | dup.
  auto guh = rng.vec(size_t(T * 2 * F), 4.0f), douth = rng.vec(size_t(T * F));
  auto gu = to_device(*be, guh, {T, 2 * F}), dout = to_device(*be, douth, {T, F});
  auto dgu = poisoned(*be, {T, 2 * F});
  be->swiglu_backward(dout.t, slice(gu, T, 2 * F, 0, F), slice(gu, T, 2 * F, F, F),
                      slice(dgu, T, 2 * F, 0, F), slice(dgu, T, 2 * F, F, F));
  const Vec dd = widen(douth);
  auto loss = [&](const Vec& v) {  // v = gate | up, row-major [T, 2F]
    double s = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < F; ++i) {
        const double g = v[size_t(t * 2 * F + i)], u = v[size_t(t * 2 * F + F + i)];
        s += dd[size_t(t * F + i)] * g / (1 + std::exp(-g)) * u;
      }
    return s;
  };
  const Vec want = numeric_grad(loss, widen(guh));
  require_near(to_host(*be, dgu.t), want, 1.0);
}

namespace {

// Float64 attention with kv_begin: out [N, H, D] and lse [N, H].
void attention_ref(const Vec& q, const Vec& k, const Vec& v, const std::vector<int32_t>& kb, int64_t N,
                   int64_t H, int64_t KVH, int64_t D, double scale, Vec* out, Vec* lse) {
  const int64_t group = H / KVH;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> s;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = kb[size_t(t)]; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i)
          d += q[size_t((t * H + h) * D + i)] * k[size_t((j * KVH + kvh) * D + i)];
        s.push_back(d * scale);
        m = std::max(m, s.back());
      }
      double sum = 0;
      for (double x : s) sum += std::exp(x - m);
      if (lse) (*lse)[size_t(t * H + h)] = m + std::log(sum);
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = kb[size_t(t)]; j <= t; ++j)
          o += std::exp(s[size_t(j - kb[size_t(t)])] - m) / sum * v[size_t((j * KVH + kvh) * D + i)];
        (*out)[size_t((t * H + h) * D + i)] = o;
      }
    }
}

}  // namespace

TEST_CASE("attention_train and its backward match float64 attention over packed documents (GQA)", "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // Two batch rows of T tokens, each cut into documents: kv_begin = row start + document start.
  const int64_t T = rng.randint(3, 9), N = 2 * T, KVH = rng.randint(1, 2), H = KVH * rng.randint(1, 3);
  const int64_t D = rng.randint(2, 8);
  const float scale = float(1 / std::sqrt(double(D)));
  std::vector<int32_t> kb(static_cast<size_t>(N));
  for (int64_t r = 0; r < 2; ++r) {
    int32_t start = int32_t(r * T);
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && rng.randint(0, 3) == 0) start = int32_t(r * T + t);
      kb[size_t(r * T + t)] = start;
    }
  }
  INFO("N " << N << " H " << H << " KVH " << KVH << " D " << D);
  // q | k | v as column slices of one [N, (H + 2 KVH) D] buffer, as the model's qkv.
  const int64_t ld = (H + 2 * KVH) * D;
  auto qkvh = rng.vec(size_t(N * ld), 2.0f), douth = rng.vec(size_t(N * H * D));
  auto qkv = to_device(*be, qkvh, {N, ld});
  auto kbt = to_device(*be, kb, {N});
  auto heads = [&](const DeviceTensor& buf, int64_t col, int64_t n) {
    Tensor t(offset(buf.t, col), DType::f32, {N, n, D});
    t.stride = {ld, D, 1, 0};
    return t;
  };
  const Tensor q = heads(qkv, 0, H), k = heads(qkv, H * D, KVH), v = heads(qkv, (H + KVH) * D, KVH);
  auto out = poisoned(*be, {N, H, D}), lse = poisoned(*be, {N, H});
  be->attention_train(q, k, v, kbt.t, scale, out.t, lse.t);

  const Vec qd = widen(host_slice(qkvh, N, ld, 0, H * D)),
            kd = widen(host_slice(qkvh, N, ld, H * D, KVH * D)),
            vd = widen(host_slice(qkvh, N, ld, (H + KVH) * D, KVH * D)), dd = widen(douth);
  Vec o(size_t(N * H * D)), l(size_t(N * H));
  attention_ref(qd, kd, vd, kb, N, H, KVH, D, scale, &o, &l);
  require_near(to_host(*be, out.t), o, 1.0, 1e-5);
  require_near(to_host(*be, lse.t), l, 1.0, 1e-5);

  auto dout = to_device(*be, douth, {N, H, D});
  auto dqkv = poisoned(*be, {N, ld});
  be->attention_train_backward(dout.t, q, k, v, kbt.t, out.t, lse.t, scale, heads(dqkv, 0, H),
                               heads(dqkv, H * D, KVH), heads(dqkv, (H + KVH) * D, KVH));
  auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
    Vec oo(size_t(N * H * D));
    attention_ref(qq, kk, vv, kb, N, H, KVH, D, scale, &oo, nullptr);
    return dot(oo, dd);
  };
  const Vec gq = numeric_grad([&](const Vec& x) { return loss(x, kd, vd); }, qd);
  const Vec gk = numeric_grad([&](const Vec& x) { return loss(qd, x, vd); }, kd);
  const Vec gv = numeric_grad([&](const Vec& x) { return loss(qd, kd, x); }, vd);
  const auto got = to_host(*be, dqkv.t);
  require_near(host_slice(got, N, ld, 0, H * D), gq, max_abs(gq));
  require_near(host_slice(got, N, ld, H * D, KVH * D), gk, max_abs(gk));
  require_near(host_slice(got, N, ld, (H + KVH) * D, KVH * D), gv, max_abs(gv));

  // A key range that reaches past the query is a caller bug, reported, not read.
  std::vector<int32_t> bad(static_cast<size_t>(N), 0);
  bad[1] = 2;
  auto badt = to_device(*be, bad, {N});
  REQUIRE_THROWS_WITH(be->attention_train(q, k, v, badt.t, scale, out.t, lse.t),
                      Catch::Contains("kv_begin[1] = 2 outside [0, 1]"));
}

// The CPU's promise (src/backend/cpu/attention_train.cpp): the training forward gives the serving
// attention's bits (what a policy is trained on is what the server sampled from), and the forward
// and backward give the same bits on every instruction-set path.
TEST_CASE("attention_train on the cpu gives paged_attention's bits, and the same bits on every path",
          "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int round = 0; round < 3; ++round) {
    const int64_t N = rng.randint(1, 60), KVH = rng.randint(1, 2), H = KVH * rng.randint(1, 3),
                  D = rng.randint(1, 70);
    const float scale = float(1 / std::sqrt(double(D)));
    INFO("N " << N << " H " << H << " KVH " << KVH << " D " << D);
    auto qh = rng.vec(size_t(N * H * D), 2.0f), kh = rng.vec(size_t(N * KVH * D)), vh = rng.vec(kh.size()),
         dh = rng.vec(qh.size());
    auto q = to_device(*be, qh, {N, H, D}), k = to_device(*be, kh, {N, KVH, D}),
         v = to_device(*be, vh, {N, KVH, D});
    auto dout = to_device(*be, dh, {N, H, D});
    auto kbt = to_device(*be, std::vector<int32_t>(size_t(N), 0), {N});  // one document
    auto forward = [&](cpu::Isa isa) {
      auto out = poisoned(*be, {N, H, D}), lse = poisoned(*be, {N, H});
      cpu::attention_train(q.t, k.t, v.t, kbt.t, scale, out.t, lse.t, isa);
      return std::pair{std::move(out), std::move(lse)};
    };
    auto backward = [&](cpu::Isa isa, const DeviceTensor& out, const DeviceTensor& lse) {
      auto dq = poisoned(*be, {N, H, D}), dk = poisoned(*be, {N, KVH, D}), dv = poisoned(*be, {N, KVH, D});
      cpu::attention_train_backward(dout.t, q.t, k.t, v.t, kbt.t, out.t, lse.t, scale, dq.t, dk.t, dv.t, isa);
      return std::vector<std::vector<float>>{to_host(*be, dq.t), to_host(*be, dk.t), to_host(*be, dv.t)};
    };
    const auto [out, lse] = forward(cpu::Isa::baseline);
    const auto grads = backward(cpu::Isa::baseline, out, lse);
    // The serving attention over the same K/V as one sequence's prefill: pages of 16 in order.
    const int64_t ps = 16, pages = (N + ps - 1) / ps;
    std::vector<float> kc(size_t(pages * ps * KVH * D)), vc(kc.size());
    std::copy(kh.begin(), kh.end(), kc.begin());
    std::copy(vh.begin(), vh.end(), vc.begin());
    std::vector<int32_t> table(static_cast<size_t>(pages));
    for (int64_t p = 0; p < pages; ++p) table[size_t(p)] = int32_t(p);
    auto kct = to_device(*be, kc, {pages * ps, KVH, D}), vct = to_device(*be, vc, {pages * ps, KVH, D});
    auto qs = to_device(*be, std::vector<int32_t>{0, int32_t(N)}, {2});
    auto kl = to_device(*be, std::vector<int32_t>{int32_t(N)}, {1});
    auto pt = to_device(*be, table, {1, pages});
    AttentionBatch batch{qs.t, kl.t, pt.t, 1, int(pages), int(ps), int(N), int(N)};
    auto served = poisoned(*be, {N, H, D});
    be->paged_attention(q.t, kct.t, vct.t, batch, scale, served.t);
    const auto want = to_host(*be, out.t);
    REQUIRE(std::memcmp(to_host(*be, served.t).data(), want.data(), want.size() * sizeof(float)) == 0);
    for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512}) {
      if (!cpu::isa_available(isa)) continue;
      INFO("path " << int(isa));
      const auto [o2, l2] = forward(isa);
      REQUIRE(to_host(*be, o2.t) == want);
      REQUIRE(to_host(*be, l2.t) == to_host(*be, lse.t));
      REQUIRE(backward(isa, o2, l2) == grads);
    }
  }
}

TEST_CASE(
    "cross_entropy gives PyTorch's smoothed loss per row and its gradient, in place or into a second buffer",
    "[unit]") {
  auto be = cpu_backend();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t R = rng.randint(1, 8), V = rng.randint(2, 60);
  const float e = rng.randint(0, 1) ? 0.0f : rng.uniform(0.0f, 0.5f), gs = rng.uniform(0.1f, 2.0f);
  INFO("R " << R << " V " << V << " label_smoothing " << e << " grad_scale " << gs);
  std::vector<int32_t> y(static_cast<size_t>(R));
  for (auto& t : y) t = rng.randint(0, 3) == 0 ? train::kIgnore : rng.randint(0, int(V) - 1);
  auto zh = rng.vec(size_t(R * V), 5.0f);
  auto z = to_device(*be, zh, {R, V});
  auto yt = to_device(*be, y, {R});
  auto losses = poisoned(*be, {R});
  // Into a second buffer (the logits are left as they were), then in place.
  auto dz = poisoned(*be, {R, V});
  be->cross_entropy(z.t, yt.t, e, gs, losses.t, dz.t);
  REQUIRE(to_host(*be, z.t) == zh);
  const std::vector<float> dz_apart = to_host(*be, dz.t);
  be->cross_entropy(z.t, yt.t, e, gs, losses.t, z.t);
  REQUIRE(to_host(*be, z.t) == dz_apart);

  auto row_loss = [&](const Vec& zz, int64_t r) {
    if (y[size_t(r)] == train::kIgnore) return 0.0;
    double m = -1e300, mean = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, zz[size_t(r * V + j)]);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) {
      s += std::exp(zz[size_t(r * V + j)] - m);
      mean += zz[size_t(r * V + j)] / double(V);
    }
    const double lse = m + std::log(s);
    return (1 - e) * (lse - zz[size_t(r * V + y[size_t(r)])]) + e * (lse - mean);
  };
  const Vec zd = widen(zh);
  Vec want_loss(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) want_loss[size_t(r)] = row_loss(zd, r);
  require_near(to_host(*be, losses.t), want_loss, 1.0, 1e-5);
  const Vec want_grad = numeric_grad(
      [&](const Vec& zz) {
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += row_loss(zz, r);
        return gs * s;
      },
      zd);
  require_near(to_host(*be, z.t), want_grad, 0.0, 1e-4, 1e-6);

  std::vector<int32_t> bad{int32_t(V)};
  auto badt = to_device(*be, bad, {1});
  REQUIRE_THROWS_WITH(be->cross_entropy(z.t.rows(0, 1), badt.t, e, gs, losses.t.rows(0, 1), z.t.rows(0, 1)),
                      Catch::Contains("target " + std::to_string(V) + " outside"));
}

}  // namespace astrai::test
