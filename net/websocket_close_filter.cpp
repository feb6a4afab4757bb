#include "net/websocket_close_filter.h"

#include <algorithm>

namespace astrai::net {

bool close_code_allowed(uint32_t code) {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1013) || (code >= 3000 && code <= 4999);
}

namespace {

// Header size once its first two bytes are known: 2, then 0/2/8 extended length bytes, then the
// 4-byte mask key when the mask bit is set.
size_t header_size(uint8_t b1) {
  const uint8_t len7 = b1 & 0x7f;
  return 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + ((b1 & 0x80) ? 4 : 0);
}

}  // namespace

size_t CloseCodeFilter::scan(std::span<uint8_t> bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (!in_payload_) {
      head_[head_len_++] = bytes[i++];
      if (head_len_ < 2 || head_len_ < header_size(head_[1])) continue;
      const uint8_t len7 = head_[1] & 0x7f;
      size_t at = 2;
      payload_len_ = len7;
      if (len7 >= 126) {
        const size_t n = len7 == 126 ? 2 : 8;
        payload_len_ = 0;
        for (size_t k = 0; k < n; ++k) payload_len_ = (payload_len_ << 8) | head_[at++];
      }
      mask_ = {0, 0, 0, 0};  // an unmasked client frame is Beast's to refuse
      if (head_[1] & 0x80) std::copy_n(head_.begin() + long(at), 4, mask_.begin());
      close_ = (head_[0] & 0x0f) == 0x8;
      payload_left_ = payload_len_;
      head_len_ = 0;
      in_payload_ = payload_left_ > 0;
      continue;
    }
    // The close code is the payload's first two bytes (masked like the rest).
    if (close_ && payload_len_ >= 2 && payload_left_ == payload_len_) {
      if (i + 1 == bytes.size()) return i;  // its second byte is still on the way
      const uint32_t code = uint32_t(bytes[i] ^ mask_[0]) << 8 | uint32_t(bytes[i + 1] ^ mask_[1]);
      if (!close_code_allowed(code)) {
        bytes[i] = mask_[0];  // unmasks to code 0
        bytes[i + 1] = mask_[1];
      }
    }
    const uint64_t take = std::min<uint64_t>(payload_left_, bytes.size() - i);
    i += size_t(take);
    payload_left_ -= take;
    in_payload_ = payload_left_ > 0;
  }
  return i;
}

}  // namespace astrai::net
