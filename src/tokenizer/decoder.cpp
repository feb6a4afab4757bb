#include "src/tokenizer/decoder.h"

#include "src/core/utf8.h"
#include "src/tokenizer/regex.h"
#include "src/tokenizer/replace.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai::tok {
namespace {

// Each code point of the GPT-2 alphabet back to its byte. A token with a code point outside the
// alphabet (an added token, or a vocabulary entry that is not byte-level) passes through as is.
class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (DecodePiece& p : pieces) {
      if (p.added) continue;
      std::string out;
      std::string_view s = p.bytes;
      bool ok = true;
      for (size_t i = 0; i < s.size();) {
        const int n = utf8_sequence_length(s.substr(i));
        const int b = n > 0 ? unicode_to_byte(utf8_decode(s.substr(i, size_t(n)))) : -1;
        if (b < 0) {
          ok = false;
          break;
        }
        out += char(b);
        i += size_t(n);
      }
      if (ok) p.bytes = std::move(out);
    }
  }
};

// Metaspace: the replacement character back to a space; the first token loses its leading space
// unless nothing was prepended when encoding.
class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string t = replace_literal(pieces[i].bytes, replacement_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
      pieces[i].bytes = std::move(t);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// <0xAB> tokens become the byte 0xAB; runs of them are joined into one piece.
class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    std::vector<DecodePiece> out;
    out.reserve(pieces.size());
    bool in_run = false;
    for (DecodePiece& p : pieces) {
      int byte = -1;
      const std::string& t = p.bytes;
      if (t.size() == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>') {
        auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          return -1;
        };
        const int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
      }
      if (byte >= 0) {
        if (!in_run) out.push_back({});
        out.back().bytes += char(byte);
        in_run = true;
      } else {
        out.push_back(std::move(p));
        in_run = false;
      }
    }
    pieces.swap(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    DecodePiece all;
    for (const DecodePiece& p : pieces) all.bytes += p.bytes;
    pieces.clear();
    pieces.push_back(std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content` from each token.
class Strip final : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    if (content_.empty()) return;
    for (DecodePiece& p : pieces) {
      std::string_view t = p.bytes;
      for (size_t i = 0; i < start_ && t.substr(0, content_.size()) == content_; ++i)
        t.remove_prefix(content_.size());
      for (size_t i = 0;
           i < stop_ && t.size() >= content_.size() && t.substr(t.size() - content_.size()) == content_; ++i)
        t.remove_suffix(content_.size());
      p.bytes = std::string(t);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  explicit Replace(Replacement r) : r_(std::move(r)) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (DecodePiece& p : pieces)
      if (!r_.is_regex() || utf8_is_valid(p.bytes)) p.bytes = r_.apply(p.bytes);
  }

 private:
  Replacement r_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (const auto& d : items_) d->decode_chain(pieces);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

Result<std::unique_ptr<Decoder>> parse_one(const JsonEl& json) {
  const std::string type = type_of(json);
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevel());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallback());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new Fuse());
  if (type == "Metaspace") {
    std::string scheme = str_or(json, "prepend_scheme", "");
    if (scheme.empty()) scheme = bool_or(json, "add_prefix_space", true) ? "always" : "never";
    return std::unique_ptr<Decoder>(
        new Metaspace(str_or(json, "replacement", "\xE2\x96\x81"), scheme != "never"));
  }
  if (type == "Strip")
    return std::unique_ptr<Decoder>(new Strip(str_or(json, "content", " "), size_t(int_or(json, "start", 0)),
                                              size_t(int_or(json, "stop", 0))));
  if (type == "Replace") {
    ASTRAI_ASSIGN_OR_RETURN(Replacement r, Replacement::parse(json, "decoder"));
    return std::unique_ptr<Decoder>(new Replace(std::move(r)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> items;
    auto list = member(json, "decoders");
    if (list && list->is_array())
      for (JsonEl item : as_array(*list)) {
        ASTRAI_ASSIGN_OR_RETURN(auto d, parse_one(item));
        items.push_back(std::move(d));
      }
    return std::unique_ptr<Decoder>(new Sequence(std::move(items)));
  }
  return unsupported("tokenizer.json: decoder type '" + type + "' is not supported");
}

}  // namespace

Result<ParsedDecoder> parse_decoder(const JsonEl& json) {
  ParsedDecoder out;
  if (json.is_null()) return out;
  ASTRAI_ASSIGN_OR_RETURN(out.decoder, parse_one(json));
  out.pure_byte_level = type_of(json) == "ByteLevel";
  return out;
}

}  // namespace astrai::tok
