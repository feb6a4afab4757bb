// CloseCodeFilter against frames built here: every byte passes once and in order, and only the code
// of a close frame that is not allowed changes (to 0), however the stream is split into reads.
#include "net/websocket_close_filter.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tools/test_util.h"

using namespace astrai::net;

namespace {

using Bytes = std::vector<uint8_t>;

// One client frame (masked), and the same frame as the filter must pass it on.
void add_frame(std::mt19937_64& rng, bool long_frames, Bytes& in, Bytes& expect) {
  const uint8_t opcodes[] = {0x1, 0x2, 0x0, 0x9, 0xa, 0x8};
  const uint8_t op = opcodes[rng() % 6];
  size_t len;
  switch (rng() % 4) {
    case 0: len = rng() % 126; break;
    case 1: len = 126 + rng() % 2000; break;                               // 16-bit extended length
    case 2: len = long_frames ? 65536 + rng() % 1000 : rng() % 10; break;  // 64-bit extended length
    default: len = op == 0x8 ? 2 : rng() % 3; break;
  }
  if (op == 0x8 && len > 125) len = 2 + rng() % 124;
  Bytes head = {uint8_t(0x80 | op)};
  if (len < 126) {
    head.push_back(uint8_t(0x80 | len));
  } else if (len < 65536) {
    head.insert(head.end(), {0x80 | 126, uint8_t(len >> 8), uint8_t(len)});
  } else {
    head.push_back(0x80 | 127);
    for (int s = 56; s >= 0; s -= 8) head.push_back(uint8_t(uint64_t(len) >> s));
  }
  const uint8_t mask[4] = {uint8_t(rng()), uint8_t(rng()), uint8_t(rng()), uint8_t(rng())};
  head.insert(head.end(), mask, mask + 4);
  Bytes plain(len);
  for (auto& b : plain) b = uint8_t(rng());
  Bytes out_plain = plain;
  if (op == 0x8 && len >= 2) {
    // Mostly the interesting codes: the edges of each allowed range.
    const uint32_t picks[] = {0,    999,  1000, 1003, 1004, 1006, 1007,
                              1013, 1014, 2999, 3000, 4999, 5000, 65535};
    const uint32_t code = rng() % 3 ? picks[rng() % 14] : uint32_t(rng() % 65536);
    plain[0] = uint8_t(code >> 8);
    plain[1] = uint8_t(code);
    out_plain = plain;
    const bool allowed =
        (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1013) || (code >= 3000 && code <= 4999);
    if (!allowed) out_plain[0] = out_plain[1] = 0;
  }
  in.insert(in.end(), head.begin(), head.end());
  expect.insert(expect.end(), head.begin(), head.end());
  for (size_t i = 0; i < len; ++i) {
    in.push_back(plain[i] ^ mask[i % 4]);
    expect.push_back(out_plain[i] ^ mask[i % 4]);
  }
}

// Feeds `in` in reads of random sizes, as the stream wrapper does: a held-back byte goes in front
// of the next read.
Bytes filter_in_reads(std::mt19937_64& rng, const Bytes& in, size_t max_read) {
  CloseCodeFilter f;
  Bytes out, held;
  size_t at = 0;
  while (at < in.size()) {
    const size_t n = std::min(in.size() - at, 1 + size_t(rng() % max_read));
    Bytes chunk = held;
    chunk.insert(chunk.end(), in.begin() + long(at), in.begin() + long(at + n));
    at += n;
    const size_t pass = f.scan(chunk);
    if (chunk.size() - pass > 1) FAIL("held back " << chunk.size() - pass << " bytes");
    out.insert(out.end(), chunk.begin(), chunk.begin() + long(pass));
    held.assign(chunk.begin() + long(pass), chunk.end());
  }
  REQUIRE(held.empty());  // the last frame is complete: nothing may stay behind
  return out;
}

}  // namespace

TEST_CASE("close codes: the RFC's ranges are allowed, everything else is not", "[unit]") {
  for (uint32_t c : {1000u, 1001u, 1002u, 1003u, 1007u, 1011u, 1013u, 3000u, 4000u, 4999u})
    CHECK(close_code_allowed(c));
  for (uint32_t c : {0u, 999u, 1004u, 1005u, 1006u, 1014u, 1015u, 1016u, 2999u, 5000u, 65535u})
    CHECK_FALSE(close_code_allowed(c));
}

TEST_CASE("the close-code filter rewrites only forbidden close codes, however the bytes are split",
          "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 200; ++round) {
    Bytes in, expect;
    const int frames = 1 + int(rng() % 12);
    const size_t max_read = round % 4 == 0 ? 1 : round % 4 == 1 ? 3 : 4096;
    for (int k = 0; k < frames; ++k) add_frame(rng, max_read > 3, in, expect);
    REQUIRE(filter_in_reads(rng, in, max_read) == expect);
  }
}

TEST_CASE("the close-code filter holds back the first byte of a close code until the second arrives",
          "[unit]") {
  CloseCodeFilter f;
  Bytes head = {0x88, 0x82, 0, 0, 0, 0, 0x13};  // close, masked with zeros, code 0x13..
  CHECK(f.scan(head) == 6);
  Bytes rest = {0x13, 0x88};  // the held byte again, then the second: 5000
  CHECK(f.scan(rest) == 2);
  CHECK(rest == Bytes{0, 0});
}
