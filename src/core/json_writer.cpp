#include "src/core/json_writer.h"

#include <charconv>
#include <cmath>

#include "src/core/utf8.h"

namespace astrai {

namespace {
const char kHex[] = "0123456789abcdef";

void append_u16_escape(std::string& out, uint32_t u) {
  out += "\\u";
  out += kHex[(u >> 12) & 15];
  out += kHex[(u >> 8) & 15];
  out += kHex[(u >> 4) & 15];
  out += kHex[u & 15];
}
}  // namespace

void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f)
            append_u16_escape(out, c);
          else
            out += char(c);
      }
      ++i;
      continue;
    }
    const int n = utf8_sequence_length(s.substr(i));
    if (n <= 0) {  // invalid byte: replacement character
      if (ensure_ascii)
        out += "\\ufffd";
      else
        out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (ensure_ascii) {
      uint32_t cp = utf8_decode(s.substr(i, n));
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u16_escape(out, 0xD800 + (cp >> 10));
        append_u16_escape(out, 0xDC00 + (cp & 0x3ff));
      } else {
        append_u16_escape(out, cp);
      }
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  out += '"';
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  json_escape(out_, k);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  json_escape(out_, s);
  return *this;
}
JsonWriter& JsonWriter::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::value(double v) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  // Shortest form can be a long digit string (3.4e20 -> "336343897724874260480"): valid JSON, but
  // an integer past 64 bits that parsers such as simdjson reject. Use the exponent form then.
  const std::string_view shortest(buf, size_t(r.ptr - buf));
  if (shortest.find_first_of(".e") == std::string_view::npos && std::abs(v) >= 1e15)
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  out_.append(buf, r.ptr);
  return *this;
}
JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}
JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

}  // namespace astrai
