#include "src/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace astrai::tok {
namespace {

// Rewrites \s and \S (inside and outside classes) to the White_Space property; everything else
// is passed through, so the pattern is still compiled by PCRE2 as written.
std::string oniguruma_compat(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's')
        out += "\\p{White_Space}";
      else if (c == 'S')
        out += "\\P{White_Space}";
      else {
        out += p[i];
        out += c;
      }
      ++i;
      continue;
    }
    out += p[i];
  }
  return out;
}

// Per-thread match state: a JIT stack big enough for long whitespace runs, and match data.
struct ThreadMatchState {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_match_data* md = nullptr;
  ThreadMatchState() {
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
    md = pcre2_match_data_create(32, nullptr);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState s;
  return s;
}

}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, const std::string& what) {
  const std::string p = oniguruma_compat(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    return invalid_argument("tokenizer.json: " + what + " /" + std::string(pattern) + "/ does not compile: " +
                            reinterpret_cast<const char*>(buf) + " (at offset " + std::to_string(off) + ")");
  }
  std::shared_ptr<Regex> r(new Regex());
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter runs it
  return std::shared_ptr<const Regex>(std::move(r));
}

Result<std::shared_ptr<const Regex>> Regex::literal(std::string_view literal, const std::string& what) {
  // \Q...\E would need escaping of \E inside; escaping each metacharacter is simpler.
  std::string p;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) p += '\\';
    p += c;
  }
  return compile(p, what);
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // pcre2_jit_match skips pcre2_match's per-call checks; the text is valid UTF-8.
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, st.md, st.ctx)
                        : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.md, st.ctx);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: step over one whole character.
      if (b >= text.size()) break;
      size_t n = 1;
      while (b + n < text.size() && (static_cast<unsigned char>(text[b + n]) & 0xC0) == 0x80) ++n;
      pos = b + n;
    }
  }
}

std::string Regex::replace_all(std::string_view text, std::string_view with) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(text, m);
  if (m.empty()) return std::string(text);
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : m) {
    out.append(text.substr(prev, b - prev));
    out.append(with);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace astrai::tok
