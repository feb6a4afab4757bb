// CloseCodeFilter, the scanner beneath the WebSocket stream that follows the client's frames: any
// bytes, split into reads at points the fuzzer picks, give the same output as one read of them all,
// and it never holds back more than one byte.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "net/websocket_close_filter.h"

using astrai::net::CloseCodeFilter;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: the read size pattern (1..16 bytes per read, varying).
  const unsigned pattern = data[0];
  const std::vector<uint8_t> in(data + 1, data + size);

  std::vector<uint8_t> whole = in;
  CloseCodeFilter one;
  size_t passed = one.scan(whole);
  if (whole.size() - passed > 1) std::abort();
  whole.resize(passed);

  CloseCodeFilter split;
  std::vector<uint8_t> out, held;
  size_t at = 0, k = 0;
  while (at < in.size()) {
    const size_t n = std::min(in.size() - at, size_t(1 + ((pattern >> (k++ % 5)) & 15)));
    std::vector<uint8_t> chunk = held;
    chunk.insert(chunk.end(), in.begin() + long(at), in.begin() + long(at + n));
    at += n;
    const size_t pass = split.scan(chunk);
    if (chunk.size() - pass > 1) std::abort();
    out.insert(out.end(), chunk.begin(), chunk.begin() + long(pass));
    held.assign(chunk.begin() + long(pass), chunk.end());
  }
  if (out != whole) std::abort();
  return 0;
}
