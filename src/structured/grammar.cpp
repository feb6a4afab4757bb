#include "src/structured/grammar.h"

#include <algorithm>
#include <array>
#include <cstddef>

namespace astrai::structured {

namespace {

// Calls visit(t) once on each state that epsilon edges reach from `from` (from included). A state
// is taken once mark[state] == stamp; the caller picks a stamp no earlier walk over `mark` used.
template <typename Visit>
void walk_eps(const Rule& r, int32_t from, std::vector<uint32_t>& mark, uint32_t stamp,
              std::vector<int32_t>& todo, Visit&& visit) {
  todo.assign(1, from);
  mark[size_t(from)] = stamp;
  while (!todo.empty()) {
    const int32_t t = todo.back();
    todo.pop_back();
    visit(t);
    for (const Edge& e : r.out[size_t(t)])
      if (e.kind == Edge::Kind::eps && mark[size_t(e.to)] != stamp) {
        mark[size_t(e.to)] = stamp;
        todo.push_back(e.to);
      }
  }
}

}  // namespace

bool Grammar::finish() {
  std::vector<uint32_t> mark;  // stamp s + 1: the walk of s's closure
  std::vector<int32_t> todo;
  auto walk = [&](const Rule& r, size_t s, auto&& visit) {
    walk_eps(r, int32_t(s), mark, uint32_t(s + 1), todo, visit);
  };
  // Counted first, without storing or sorting, so that a grammar past the budget is refused at
  // the cost of the walk alone.
  size_t entries = 0;
  for (const Rule& r : rules) {
    mark.assign(r.out.size(), 0);
    for (size_t s = 0; s < r.out.size(); ++s) {
      walk(r, s, [&](int32_t) { ++entries; });
      if (entries > kMaxClosureEntries) return false;
    }
  }
  for (Rule& r : rules) {
    const size_t n = r.out.size();
    r.closure_at.assign(1, 0);
    r.closure.clear();
    r.scans.assign(n, 0);
    r.tag.resize(n, -1);
    for (size_t t = 0; t < n; ++t)
      for (const Edge& e : r.out[t])
        if (e.kind == Edge::Kind::byte) r.scans[t] = 1;
    mark.assign(n, 0);
    for (size_t s = 0; s < n; ++s) {
      const auto begin = std::ptrdiff_t(r.closure.size());
      walk(r, s, [&](int32_t t) { r.closure.push_back(t); });
      std::sort(r.closure.begin() + begin, r.closure.end());
      r.closure_at.push_back(int32_t(r.closure.size()));
    }
  }
  return true;
}

size_t Grammar::num_states() const {
  size_t n = 0;
  for (const Rule& r : rules) n += r.out.size();
  return n;
}

// ---- code point ranges ---------------------------------------------------------------------------

namespace {
constexpr uint32_t kMaxCode = 0x10FFFF;
}

std::vector<CodeRange> normalize_ranges(const std::vector<CodeRange>& r) {
  std::vector<CodeRange> split;
  for (CodeRange c : r) {
    if (c.lo > c.hi || c.lo > kMaxCode) continue;
    c.hi = std::min(c.hi, kMaxCode);
    // Cut the surrogates out.
    if (c.lo < 0xD800 && c.hi >= 0xD800) split.push_back({c.lo, 0xD7FF});
    if (c.hi > 0xDFFF && c.lo <= 0xDFFF) split.push_back({0xE000, c.hi});
    if (c.hi < 0xD800 || c.lo > 0xDFFF) split.push_back(c);
  }
  std::sort(split.begin(), split.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  for (CodeRange c : split) {
    if (!out.empty() && c.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, c.hi);
    else
      out.push_back(c);
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& r) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (CodeRange c : r) {
    if (c.lo > next) out.push_back({next, c.lo - 1});
    next = c.hi + 1;
  }
  if (next <= kMaxCode) out.push_back({next, kMaxCode});
  return normalize_ranges(out);
}

std::vector<CodeRange> intersect_ranges(const std::vector<CodeRange>& a, const std::vector<CodeRange>& b) {
  std::vector<CodeRange> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].hi < b[j].hi)
      ++i;
    else
      ++j;
  }
  return out;
}

namespace {

int utf8_len(uint32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

std::array<uint8_t, 4> utf8_bytes(uint32_t c, int n) {
  std::array<uint8_t, 4> b{};
  if (n == 1) {
    b[0] = uint8_t(c);
  } else if (n == 2) {
    b[0] = uint8_t(0xC0 | (c >> 6));
    b[1] = uint8_t(0x80 | (c & 0x3F));
  } else if (n == 3) {
    b[0] = uint8_t(0xE0 | (c >> 12));
    b[1] = uint8_t(0x80 | ((c >> 6) & 0x3F));
    b[2] = uint8_t(0x80 | (c & 0x3F));
  } else {
    b[0] = uint8_t(0xF0 | (c >> 18));
    b[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
    b[2] = uint8_t(0x80 | ((c >> 6) & 0x3F));
    b[3] = uint8_t(0x80 | (c & 0x3F));
  }
  return b;
}

using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (code points of one UTF-8 length n) into rectangles: byte sequences where each
// position takes every value of a range independently. The range is cut at the boundaries where
// the lower continuation bytes wrap (the standard construction of UTF-8 range automata).
void split_rect(uint32_t lo, uint32_t hi, int n, std::vector<ByteSeq>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_rect(lo, lo | m, n, out);
        split_rect((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        split_rect(lo, (hi & ~m) - 1, n, out);
        split_rect(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  const auto a = utf8_bytes(lo, n), b = utf8_bytes(hi, n);
  ByteSeq s;
  for (int k = 0; k < n; ++k) s.emplace_back(a[size_t(k)], b[size_t(k)]);
  out.push_back(std::move(s));
}

}  // namespace

// ---- builder --------------------------------------------------------------------------------------

int32_t GrammarBuilder::begin_rule(std::string name) {
  g_.rules.emplace_back();
  cur_ = int32_t(g_.rules.size() - 1);
  rule().name = std::move(name);
  return cur_;
}

void GrammarBuilder::end_rule(Frag body) {
  Rule& r = rule();
  r.start = body.in;
  r.final.assign(r.out.size(), 0);
  r.final[size_t(body.out)] = 1;
}

void GrammarBuilder::tag_scanning_from(int32_t from, int32_t value) {
  Rule& r = rule();
  if (r.tag.size() < r.out.size()) r.tag.resize(r.out.size(), -1);
  if (mark_.size() < r.out.size()) mark_.resize(r.out.size(), 0);
  walk_eps(r, from, mark_, ++stamp_, todo_, [&](int32_t s) {
    for (const Edge& e : r.out[size_t(s)])
      if (e.kind == Edge::Kind::byte) r.tag[size_t(s)] = value;
  });
}

int32_t GrammarBuilder::add_string_position(StringPosition p) {
  g_.string_positions.push_back(p);
  return int32_t(g_.string_positions.size() - 1);
}

int32_t GrammarBuilder::state() {
  if (++states_ > kMaxGrammarStates) throw GrammarTooLarge{};
  rule().out.emplace_back();
  return int32_t(rule().out.size() - 1);
}

void GrammarBuilder::eps(int32_t from, int32_t to) {
  Edge e;
  e.kind = Edge::Kind::eps;
  e.to = to;
  rule().out[size_t(from)].push_back(e);
}

Frag GrammarBuilder::empty() {
  const int32_t s = state();
  return {s, s};
}

Frag GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  const int32_t a = state(), b = state();
  Edge e;
  e.kind = Edge::Kind::byte;
  e.lo = lo;
  e.hi = hi;
  e.to = b;
  rule().out[size_t(a)].push_back(e);
  return {a, b};
}

Frag GrammarBuilder::literal(std::string_view bytes) {
  Frag f = empty();
  for (char c : bytes) f = seq(f, byte_range(uint8_t(c), uint8_t(c)));
  return f;
}

Frag GrammarBuilder::code_points(const std::vector<CodeRange>& ranges) {
  std::vector<ByteSeq> seqs;
  for (CodeRange c : ranges) {
    // One length class at a time.
    const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCode};
    uint32_t lo = c.lo;
    for (uint32_t b : bounds) {
      if (lo > c.hi) break;
      if (lo > b) continue;
      const uint32_t hi = std::min(c.hi, b);
      split_rect(lo, hi, utf8_len(lo), seqs);
      lo = hi + 1;
    }
  }
  // A shared entry and exit; sequences with a common first byte range share nothing further (the
  // matcher's DFA merges them anyway).
  const int32_t in = state(), out = state();
  for (const ByteSeq& s : seqs) {
    int32_t at = in;
    for (size_t k = 0; k < s.size(); ++k) {
      const int32_t to = k + 1 == s.size() ? out : state();
      Edge e;
      e.kind = Edge::Kind::byte;
      e.lo = s[k].first;
      e.hi = s[k].second;
      e.to = to;
      rule().out[size_t(at)].push_back(e);
      at = to;
    }
  }
  return {in, out};
}

Frag GrammarBuilder::call(int32_t r) {
  const int32_t a = state(), b = state();
  Edge e;
  e.kind = Edge::Kind::call;
  e.rule = r;
  e.to = b;
  rule().out[size_t(a)].push_back(e);
  return {a, b};
}

Frag GrammarBuilder::seq(Frag a, Frag b) {
  eps(a.out, b.in);
  return {a.in, b.out};
}

Frag GrammarBuilder::alt(const std::vector<Frag>& options) {
  const int32_t in = state(), out = state();
  for (Frag f : options) {
    eps(in, f.in);
    eps(f.out, out);
  }
  return {in, out};
}

Frag GrammarBuilder::opt(Frag f) {
  eps(f.in, f.out);
  return f;
}

Frag GrammarBuilder::star(Frag f) {
  // A separate exit state: a fragment's exit must have no edges of its own, or an opt() / seq()
  // around it would reach the loop from outside (`{` then `,` in "{ (member (, member)*)? }").
  const int32_t s = state(), out = state();
  eps(s, f.in);
  eps(f.out, s);
  eps(s, out);
  return {s, out};
}

Frag GrammarBuilder::repeat(const std::function<Frag()>& make, int64_t min, int64_t max) {
  Frag f = empty();
  for (int64_t i = 0; i < min; ++i) f = seq(f, make());
  if (max < 0) return seq(f, star(make()));
  // Nested optionals: x(x(x)?)? rather than x?x?x?, so that the DFA does not see the same count
  // reached along several paths.
  if (max > min) {
    std::vector<Frag> parts;
    for (int64_t i = min; i < max; ++i) parts.push_back(make());
    const int32_t end = state();
    for (size_t i = 0; i < parts.size(); ++i) {
      eps(i == 0 ? f.out : parts[i - 1].out, parts[i].in);
      eps(i == 0 ? f.out : parts[i - 1].out, end);
    }
    eps(parts.back().out, end);
    return {f.in, end};
  }
  return f;
}

}  // namespace astrai::structured
