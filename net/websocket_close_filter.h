// Close codes a WebSocket client may not send (RFC 6455 7.4), caught before Beast sees them.
//
// Beast answers a client's close frame by echoing its status code. It refuses (with 1002, protocol
// error) the codes it knows to be reserved: 0-999, 1004-1006, 1014-2999; a code of 5000 or more,
// which no registry assigns, it echoes back. Its control callback runs before that echo is written
// and cannot change it, so this filter sits on the bytes from the client instead: it follows the
// frame boundaries and rewrites the status code of a close frame that is not allowed to 0, which
// Beast then refuses with 1002 like the reserved codes. Asio-free, so that it can be fuzzed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace astrai::net {

// 1000-1003, 1007-1013 (IANA's registry, less Beast's reserved 1014) and 3000-4999 (libraries and
// applications). Anything else from a client is a protocol error.
bool close_code_allowed(uint32_t code);

class CloseCodeFilter {
 public:
  // Scans `bytes`, the next bytes from the client, rewriting in place. Returns how many leading
  // bytes may go on to the WebSocket parser now. The rest (at most one byte: the first half of a
  // close code whose second half has not arrived) was not consumed: pass it again at the front of
  // the next bytes.
  size_t scan(std::span<uint8_t> bytes);

 private:
  std::array<uint8_t, 14> head_{};  // the current frame's header: 2 + up to 8 length + 4 mask bytes
  size_t head_len_ = 0;
  bool in_payload_ = false;
  bool close_ = false;         // the current frame is a close frame
  uint64_t payload_left_ = 0;  // payload bytes of the current frame not yet seen
  uint64_t payload_len_ = 0;
  std::array<uint8_t, 4> mask_{};
};

}  // namespace astrai::net
