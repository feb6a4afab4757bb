// embedding, swiglu, add, gather_rows, convert and dequantize against float64 / scalar references,
// on every backend.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "backend/op_test_util.h"
#include "src/core/out_of_memory.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

void embedding_copies_rows(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // A multiple of 8 wide (the GPU's 16-byte copies) and any width (its one-element path); the table
  // in the compute dtype and as a bf16 checkpoint's table is kept (the CPU: bf16, widened).
  for (const DType table_dtype : {be.compute_dtype(), be.weight_dtype(DType::bf16)})
    for (const int64_t H : {8 * rng.randint(1, 300), rng.randint(1, 77)}) {
      INFO("H " << H << " table " << dtype_name(table_dtype));
      const int64_t V = rng.randint(1, 300), T = rng.randint(1, 50);
      auto th = rng.vec(size_t(V * H));
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (auto& i : ids) i = rng.randint(0, int(V) - 1);
      auto table = to_device(be, th, {V, H}, table_dtype);
      auto idt = to_device(be, ids, {T});
      auto out = poisoned(be, {T, H});
      be.embedding(table.t, idt.t, out.t);
      auto got = to_host(be, out.t);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < H; ++i) REQUIRE(got[t * H + i] == th[ids[t] * H + i]);
    }
}

void swiglu_on_fused_halves(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // A multiple of 8 wide (the GPU's 16-byte path) and any width (its one-element path).
  for (const int64_t F : {8 * rng.randint(1, 375), rng.randint(1, 3000)}) {
    const int64_t T = rng.randint(1, 20);
    INFO("F " << F);
    auto gu = rng.vec(size_t(T * 2 * F), 12.0f);  // large |g| exercises exp overflow / underflow
    auto buf = to_device(be, gu, {T, 2 * F});
    Tensor gate = buf.t, up = buf.t;
    gate.shape[1] = F;
    up.shape[1] = F;
    up.data = offset(buf.t, F);
    auto out = poisoned(be, {T, F});
    be.swiglu(gate, up, out.t);
    auto got = to_host(be, out.t);
    std::vector<double> want(got.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < F; ++i) {
        const double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
        want[t * F + i] = g / (1.0 + std::exp(-g)) * u;
      }
    require_close(
        be, got, want, [&](size_t i) { return std::abs(want[i]); }, Tol{1e-6, 1e-6});
  }
}

// Every finite bf16 value as a gate (up = 1), against silu in float64. An f32 backend to 1e-6; a bf16
// one at most one bf16 step from the correctly rounded value (the GPU's fast exponential and division
// may move the last bit), and results below 1e-30 (gates under -87, where the GPU's division flushes
// to 0) to 1e-30.
void swiglu_of_every_bf16_gate(Backend& be) {
  std::vector<float> gates;
  for (uint32_t b = 0; b < 0x10000; ++b)
    if (const float g = bf16_to_f32(uint16_t(b)); std::isfinite(g)) gates.push_back(g);
  const auto F = int64_t(gates.size());
  std::vector<float> gu(gates);
  gu.resize(size_t(2 * F), 1.0f);
  auto buf = to_device(be, gu, {1, 2 * F});
  auto out = poisoned(be, {1, F});
  be.swiglu(buf.t.cols(0, F), buf.t.cols(F, 2 * F), out.t);
  const auto got = to_host(be, out.t);
  const bool f32 = be.compute_dtype() == DType::f32;
  for (size_t i = 0; i < gates.size(); ++i) {
    const double g = gates[i], want = g / (1.0 + std::exp(-g));
    INFO(be.name() << ": gate " << g << " got " << got[i] << " want " << want);
    if (std::abs(want) < 1e-30 || f32) {
      REQUIRE(std::abs(got[i] - want) <= 1e-6 * std::abs(want) + 1e-30);
      continue;
    }
    const int32_t step = int32_t(f32_to_bf16(got[i])) - int32_t(f32_to_bf16(float(want)));
    REQUIRE(std::abs(step) <= 1);  // same sign: a bf16's bits order its magnitude
  }
}

void add_sums(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (const int64_t D : {8 * rng.randint(1, 375), rng.randint(1, 3000)}) {
    const int64_t R = rng.randint(1, 20);
    INFO("D " << D);
    auto ah = rng.vec(size_t(R * D)), bh = rng.vec(size_t(R * D));
    auto a = to_device(be, ah, {R, D}), b = to_device(be, bh, {R, D});
    auto out = poisoned(be, {R, D});
    be.add(a.t, b.t, out.t);
    auto got = to_host(be, out.t);
    // One rounding of the exact sum to the compute dtype.
    for (size_t i = 0; i < ah.size(); ++i) REQUIRE(got[i] == round_to(be.compute_dtype(), ah[i] + bh[i]));
  }
}

void gather_rows_in_order(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // A multiple of 8 wide (the GPU's 16-byte copies) and any width (its one-element path).
  for (const int64_t H : {8 * rng.randint(1, 300), rng.randint(1, 900)}) {
    const int64_t T = rng.randint(1, 40), R = rng.randint(1, 12);
    INFO("T " << T << ", H " << H << ", R " << R);
    std::vector<int32_t> rows(static_cast<size_t>(R));
    for (auto& r : rows) r = rng.randint(0, int(T) - 1);
    auto rt = to_device(be, rows, {R});
    // The compute dtype (activations) and f32 (logits) both gather bit for bit.
    for (DType dt : {be.compute_dtype(), DType::f32}) {
      auto xh = rng.vec(size_t(T * H));
      auto x = to_device(be, xh, {T, H}, dt);
      auto out = poisoned(be, {R, H}, dt);
      be.gather_rows(x.t, rt.t, out.t);
      auto got = to_host(be, out.t);
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < H; ++j) REQUIRE(got[i * H + j] == xh[rows[i] * H + j]);
    }
  }
}

// The overlapped step loop's two device-side pieces: take_tokens against a scalar loop, and the
// async download (into page-locked memory, waited for by ticket) that reads its result back.
void take_tokens_moves_drawn_tokens(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int round = 0; round < 4; ++round) {
    const int64_t T = rng.randint(1, 600), D = rng.randint(1, 300), W = rng.randint(1, 42);
    std::vector<int32_t> ids(static_cast<size_t>(T)), draws(static_cast<size_t>(D * W)), moves;
    for (auto& i : ids) i = rng.randint(0, 1 << 20);
    for (auto& d : draws) d = rng.randint(0, 1 << 20);
    for (int64_t r = 0; r < T; ++r)
      if (rng.randint(0, 2) == 0) {  // about a third of the rows, increasing, any draw (repeats too)
        moves.push_back(int32_t(r));
        moves.push_back(rng.randint(0, int(D) - 1));
      }
    const int64_t M = int64_t(moves.size() / 2);
    INFO("T " << T << ", D " << D << ", W " << W << ", M " << M);
    std::vector<int32_t> want = ids;
    for (int64_t m = 0; m < M; ++m)
      want[size_t(moves[size_t(2 * m)])] = draws[size_t(moves[size_t(2 * m + 1)] * W)];
    auto idt = to_device(be, ids, {T});
    auto dt = to_device(be, draws, {D, W});
    std::vector<int32_t> none = {0, 0};  // a valid address for M = 0
    auto mt = M > 0 ? to_device(be, moves, {M, 2}) : to_device(be, none, {1, 2});
    be.take_tokens(idt.t, M > 0 ? mt.t : Tensor(mt.t.data, DType::i32, {0, 2}, be.device()), dt.t);
    Buffer host = be.alloc_host_pinned(size_t(T) * 4);
    const uint64_t ticket = be.download_async(host.data(), idt.t);
    be.wait_download(ticket);
    const auto* got = static_cast<const int32_t*>(host.data());
    for (int64_t t = 0; t < T; ++t) REQUIRE(got[t] == want[size_t(t)]);
  }
}

void convert_rounds_and_widens(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t n = rng.randint(1, 5000);
  auto xh = rng.vec(size_t(n), 100.0f);
  auto x = to_device(be, xh, {n}, DType::f32);
  for (DType t : {DType::bf16, DType::f16}) {
    auto half = poisoned(be, {n}, t);
    auto back = poisoned(be, {n}, DType::f32);
    be.convert(x.t, half.t);
    be.convert(half.t, back.t);
    auto got = to_host(be, back.t);
    // Round to nearest even, exactly as the host conversion does.
    for (int64_t i = 0; i < n; ++i) REQUIRE(got[i] == round_to(t, xh[i]));
  }
  // Equal dtypes copy: small, and in the CPU's threaded 1 MiB slices (five, the last one partial).
  for (const int64_t m : {int64_t(rng.randint(1, 5000)), int64_t((4 << 20) / 2 + rng.randint(1, 99999))}) {
    INFO("copy of " << m << " bf16");
    auto src_h = rng.vec(size_t(m));
    auto src = to_device(be, src_h, {m}, DType::bf16);
    auto dst = poisoned(be, {m}, DType::bf16);
    be.convert(src.t, dst.t);
    REQUIRE(to_host(be, dst.t) == src_h);
  }
}

// An e4m3 byte's value from the format's definition (sign, exponent bias 7, three mantissa bits,
// subnormals below exponent 1), written apart from the library's bit-level decoder.
double e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e ? std::ldexp(8.0 + m, e - 10) : std::ldexp(double(m), -9);
  return b & 0x80 ? -mag : mag;
}

TEST_CASE("fp8_e4m3_to_f32 decodes every byte as the e4m3fn format defines it", "[unit]") {
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);  // the largest finite
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(fp8_e4m3_to_f32(0xb8) == -1.0f);
  CHECK(std::signbit(fp8_e4m3_to_f32(0x80)));
  for (int b = 0; b < 256; ++b) {
    INFO("byte " << b);
    if ((b & 0x7f) == 0x7f) {
      CHECK(std::isnan(fp8_e4m3_to_f32(uint8_t(b))));
    } else {
      CHECK(double(fp8_e4m3_to_f32(uint8_t(b))) == e4m3_value(uint8_t(b)));
    }
  }
}

// Random fp8 matrices in every scale layout a checkpoint uses (one scale, one a row, 128 x 128
// blocks over sizes they do not divide, random blocks), scales f32 and bf16, into f32 and the
// backend's dtypes: each element exactly the float64 product rounded to f32, then to out's dtype.
// Layouts 4 and 5 have columns and column blocks in multiples of 8 (the CUDA backend's 8-wide path
// into bf16, which a GEMM over fp8 weights kept on the device runs each step).
void dequantize_scales_each_block(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int layout = 0; layout < 6; ++layout) {
    const int64_t R = layout == 2 || layout == 4 ? rng.randint(129, 400) : rng.randint(1, 300);
    const int64_t C = layout == 2   ? rng.randint(129, 400)
                      : layout >= 4 ? 8 * rng.randint(layout == 4 ? 17 : 1, 50)
                                    : rng.randint(1, 300);
    int64_t br = R, bc = C;  // layout 0: one scale
    if (layout == 1) br = 1;
    if (layout == 2 || layout == 4) br = bc = 128;
    if (layout == 3) br = rng.randint(1, int(R) + 3), bc = rng.randint(1, int(C) + 3);
    if (layout == 5) br = rng.randint(1, int(R) + 3), bc = 8 * rng.randint(1, 8);
    const int64_t sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
    std::vector<uint8_t> qh(size_t(R * C));
    for (auto& b : qh) {
      do b = uint8_t(rng.randint(0, 255));
      while ((b & 0x7f) == 0x7f);  // NaN: never in a checkpoint
    }
    for (const DType scale_dtype : {DType::f32, DType::bf16})
      for (const DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
        INFO("R " << R << " C " << C << " blocks " << br << " x " << bc << " scale "
                  << dtype_name(scale_dtype) << " out " << dtype_name(out_dtype));
        std::vector<float> sh(size_t(sr * sc));
        for (auto& s : sh) s = std::ldexp(rng.uniform(0.5f, 1.0f), rng.randint(-14, 2));
        auto scale = to_device(be, sh, {sr, sc}, scale_dtype);
        Buffer qbuf = be.alloc(qh.size());
        const Tensor q = qbuf.as(DType::fp8_e4m3, {R, C});
        be.upload(q, qh.data());
        auto out = poisoned(be, {R, C}, out_dtype);
        be.dequantize(q, scale.t, br, bc, out.t);
        const auto got = to_host(be, out.t);
        for (int64_t i = 0; i < R; ++i)
          for (int64_t j = 0; j < C; ++j) {
            const double exact =
                e4m3_value(qh[size_t(i * C + j)]) * double(sh[size_t((i / br) * sc + j / bc)]);
            const float want = round_to(out_dtype, float(exact));
            INFO("element " << i << ", " << j);
            REQUIRE(got[size_t(i * C + j)] == want);
          }
      }
  }
  // Operands that do not fit are refused with a message, not read out of bounds.
  std::vector<float> one{1.0f};
  auto scale = to_device(be, one, {1, 1}, DType::f32);
  Buffer qbuf = be.alloc(64);
  auto out = zeros(be, {8, 8}, DType::f32);
  REQUIRE_THROWS_WITH(be.dequantize(qbuf.as(DType::fp8_e4m3, {8, 8}), scale.t, 4, 8, out.t),
                      Catch::Contains("scale [1, 1] must be [2, 1]"));
  REQUIRE_THROWS_WITH(be.dequantize(qbuf.as(DType::u8, {8, 8}), scale.t, 8, 8, out.t),
                      Catch::Contains("q must be fp8_e4m3"));
}

void memory_available_is_positive_and_bounded(Backend& be) {
  const int64_t avail = be.memory_available();
  CHECK(avail > 0);
  if (be.device() == Device::cpu) CHECK(avail <= int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
  // What is free shrinks by about what we take (the KV cache is sized from it).
  const size_t take = size_t(256) << 20;
  Buffer b = be.alloc(take);
  const int64_t after = be.memory_available();
  if (be.device() != Device::cpu) CHECK(after <= avail - int64_t(take) / 2);
}

// More than any machine's memory or address space: the allocation fails with an OutOfMemory
// (a std::bad_alloc) that says how much was asked, and on a GPU how much was free; the backend then
// allocates as before.
void alloc_beyond_memory_says_what_did_not_fit(Backend& be) {
  const size_t ask = size_t(1) << 50;  // 1 PiB
  bool threw = false;
  try {
    Buffer b = be.alloc(ask);
  } catch (const OutOfMemory& e) {
    threw = true;
    CHECK_THAT(e.what(), Catch::Contains("out of") && Catch::Contains("1048576.00 GiB asked"));
    if (be.device() == Device::cuda) CHECK_THAT(e.what(), Catch::Contains(" GiB free"));
  }
  CHECK(threw);
  Buffer ok = be.alloc(size_t(1) << 20);
  CHECK(ok.data() != nullptr);
  CHECK(be.memory_available() > 0);
}

}  // namespace

ASTRAI_BACKEND_TEST("memory_available reports free memory the KV cache can be sized from",
                    memory_available_is_positive_and_bounded)
ASTRAI_BACKEND_TEST("alloc beyond the memory throws OutOfMemory, saying what did not fit",
                    alloc_beyond_memory_says_what_did_not_fit)
ASTRAI_BACKEND_TEST("embedding copies the table row of each id", embedding_copies_rows)
ASTRAI_BACKEND_TEST("swiglu on the two halves of a fused gate_up buffer is silu(gate) * up",
                    swiglu_on_fused_halves)
ASTRAI_BACKEND_TEST("swiglu of every finite bf16 gate is silu within a step of bf16",
                    swiglu_of_every_bf16_gate)
ASTRAI_BACKEND_TEST("add sums element-wise", add_sums)
ASTRAI_BACKEND_TEST("gather_rows picks rows in the given order, repeats allowed", gather_rows_in_order)
ASTRAI_BACKEND_TEST("convert rounds f32 to bf16 / f16 to nearest, widens back and copies equal dtypes",
                    convert_rounds_and_widens)
ASTRAI_BACKEND_TEST("dequantize multiplies each fp8 element by its block's scale, exactly",
                    dequantize_scales_each_block)
ASTRAI_BACKEND_TEST("take_tokens moves each drawn token into its row; download_async brings it back",
                    take_tokens_moves_drawn_tokens)

TEST_CASE("take_tokens rejects a move outside the ids or the draws", "[unit]") {
  auto be = cpu_backend();
  auto ids = to_device(*be, std::vector<int32_t>{1, 2, 3}, {3});
  auto draws = to_device(*be, std::vector<int32_t>{7, 8}, {2, 1});
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{3, 0}, {0, 2}, {-1, 0}}) {
    auto mv = to_device(*be, bad, {1, 2});
    CHECK_THROWS_WITH(be->take_tokens(ids.t, mv.t, draws.t), Catch::Contains("outside"));
  }
  auto mv = to_device(*be, std::vector<int32_t>{0, 1}, {1, 2});
  CHECK_THROWS_WITH(be->take_tokens(ids.t, mv.t, ids.t), Catch::Contains("draws must be"));
}

TEST_CASE("embedding rejects an id outside the table", "[unit]") {
  auto be = cpu_backend();
  std::vector<float> th(12, 1.0f);
  auto table = to_device(*be, th, {3, 4});
  auto bad = to_device(*be, std::vector<int32_t>{3}, {1});
  auto out = zeros(*be, {1, 4});
  REQUIRE_THROWS_AS(be->embedding(table.t, bad.t, out.t), Error);
}

}  // namespace astrai::test
