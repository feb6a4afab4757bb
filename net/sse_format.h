// Server-Sent Events framing (WHATWG HTML, "Server-sent events"): optional `event:` line, one
// `data:` line per line of payload, then a blank line.
#pragma once

#include <string>
#include <string_view>

namespace astrai::net {

inline void append_sse(std::string& out, std::string_view data, std::string_view event = {}) {
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  // A newline inside the payload would end the field; JSON we write never has raw newlines, but
  // split anyway so any payload stays one event.
  size_t start = 0;
  for (;;) {
    const size_t nl = data.find('\n', start);
    out += "data: ";
    out += data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
}

}  // namespace astrai::net
