// Builds JSON text with correct escaping. Strings must be UTF-8; invalid sequences are written
// as U+FFFD so the output is always valid JSON. Commas are placed automatically.
//
//   JsonWriter w;  w.begin_object().key("id").value(3).key("text").value("hi").end_object();
//   w.str() == R"({"id":3,"text":"hi"})"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace astrai {

// Appends s as a JSON string literal (with quotes) to out. ensure_ascii escapes non-ASCII as \uXXXX.
void json_escape(std::string& out, std::string_view s, bool ensure_ascii = false);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b);
  JsonWriter& value(int v) { return value(int64_t(v)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(uint64_t v);
  JsonWriter& value(double v);  // shortest round-trip form; NaN/inf -> null
  JsonWriter& value(float v) { return value(double(v)); }
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);  // an already-serialised JSON value

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }
  void clear() {
    out_.clear();
    first_.clear();
  }

 private:
  void before_value();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace astrai
