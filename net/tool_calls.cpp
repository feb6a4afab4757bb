#include "net/tool_calls.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "src/core/json_fields.h"

namespace astrai::net {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_call_object(simdjson::ondemand::object obj, ToolCall& out) {
  bool have_name = false;
  out.arguments_json = "{}";
  // The callback returns true to stop: this call's JSON is not a tool call.
  const bool bad = json::for_each_field(
      obj,
      [&](std::string_view key, json::Value& v) {
        if (key == "name") {
          std::string_view name;
          if (v.get_string().get(name)) return true;
          out.name = std::string(name);
          have_name = true;
        } else if (key == "arguments" || key == "parameters") {
          simdjson::ondemand::json_type t;
          if (v.type().get(t)) return true;
          if (t == simdjson::ondemand::json_type::object) {
            simdjson::ondemand::object a;
            std::string_view raw;
            if (v.get_object().get(a) || a.raw_json().get(raw)) return true;
            out.arguments_json = std::string(trim(raw));
          } else if (t == simdjson::ondemand::json_type::string) {
            std::string_view s;
            if (v.get_string().get(s)) return true;
            out.arguments_json = std::string(s);  // already JSON text (OpenAI style)
          } else {
            return true;
          }
        }
        return false;
      },
      [](simdjson::error_code) { return true; });
  return !bad && have_name && !out.name.empty();
}

}  // namespace

size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

std::string new_tool_call_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())};
  // splitmix64 of a counter: unique within the process, random-looking across runs.
  uint64_t z = counter.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(z));
  return std::string(prefix) + hex;
}

bool parse_tool_call_json(std::string_view json, ToolCall& out) {
  simdjson::ondemand::parser parser;
  simdjson::padded_string padded(trim(json));
  simdjson::ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return false;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return false;
  ToolCall call;
  if (!parse_call_object(obj, call)) return false;
  call.id = new_tool_call_id();
  out = std::move(call);
  return true;
}

namespace {

// The whole text as bare JSON: one call object or an array of them.
bool parse_bare_json(std::string_view text, std::vector<ToolCall>& calls) {
  text = trim(text);
  if (text.empty()) return false;
  if (text.front() == '{') {
    ToolCall c;
    if (!parse_tool_call_json(text, c)) return false;
    calls.push_back(std::move(c));
    return true;
  }
  if (text.front() != '[') return false;
  simdjson::ondemand::parser parser;
  simdjson::padded_string padded(text);
  simdjson::ondemand::document doc;
  simdjson::ondemand::array arr;
  if (parser.iterate(padded).get(doc) || doc.get_array().get(arr)) return false;
  std::vector<ToolCall> found;
  for (auto el : arr) {
    simdjson::ondemand::object obj;
    if (el.get_object().get(obj)) return false;
    ToolCall c;
    if (!parse_call_object(obj, c)) return false;
    c.id = new_tool_call_id();
    found.push_back(std::move(c));
  }
  if (found.empty()) return false;
  for (auto& c : found) calls.push_back(std::move(c));
  return true;
}

}  // namespace

ToolParse parse_tool_calls(std::string_view text) {
  ToolCallStreamParser p;
  return p.feed(text, /*last=*/true);
}

ToolParse ToolCallStreamParser::feed(std::string_view delta, bool last) {
  ToolParse out = push(delta);
  if (!last) return out;
  ToolParse tail = finish();
  out.content += tail.content;
  for (auto& c : tail.calls) out.calls.push_back(std::move(c));
  return out;
}

ToolParse ToolCallStreamParser::push(std::string_view delta) {
  buf_.append(delta);
  ToolParse out;
  drain(out, false);
  return out;
}

ToolParse ToolCallStreamParser::finish() {
  ToolParse out;
  drain(out, true);
  return out;
}

void ToolCallStreamParser::drain(ToolParse& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::start: {
        const std::string_view t = trim(buf_);
        if (t.empty()) {
          if (final) {
            out.content += buf_;
            buf_.clear();
          }
          return;
        }
        state_ = (t.front() == '{' || t.front() == '[') ? State::bare_json : State::text;
        break;
      }
      case State::bare_json:
        if (!final) return;
        if (!parse_bare_json(buf_, out.calls)) {
          // Not a call after all: treat it as ordinary text (it may still contain tagged calls).
          state_ = State::text;
          break;
        }
        buf_.clear();
        return;
      case State::text: {
        const size_t at = buf_.find(kOpen);
        if (at != std::string::npos) {
          out.content.append(buf_, 0, at);
          buf_.erase(0, at + kOpen.size());
          state_ = State::in_call;
          break;
        }
        const size_t keep = final ? 0 : partial_tag_suffix(buf_, kOpen);
        out.content.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case State::in_call: {
        const size_t at = buf_.find(kClose);
        if (at == std::string::npos && !final) return;
        const std::string_view body =
            std::string_view(buf_).substr(0, at == std::string::npos ? buf_.size() : at);
        ToolCall c;
        if (parse_tool_call_json(body, c)) {
          out.calls.push_back(std::move(c));
        } else {
          // Keep what the model wrote, tags included.
          out.content.append(kOpen);
          out.content.append(buf_, 0, at == std::string::npos ? buf_.size() : at + kClose.size());
        }
        buf_.erase(0, at == std::string::npos ? buf_.size() : at + kClose.size());
        state_ = State::text;
        if (at == std::string::npos) return;
        break;
      }
    }
  }
}

}  // namespace astrai::net
