#include "src/structured/token_grammar.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "src/core/lru_cache.h"
#include "src/core/utf8.h"
#include "src/structured/json_schema.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::structured {

// ---- vocabulary -----------------------------------------------------------------------------------

namespace {

// The trie of `ids` (in preorder: sorted strings add the nodes past their common prefix with the
// previous one).
TokenVocabulary::Trie build_trie(std::vector<int32_t> ids, const std::vector<std::string>& bytes) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[size_t(a)] != bytes[size_t(b)] ? bytes[size_t(a)] < bytes[size_t(b)] : a < b;
  });
  TokenVocabulary::Trie t;
  std::vector<int32_t> path;  // node of each depth along the previous string
  const std::string* prev = nullptr;
  std::vector<std::vector<int32_t>> node_toks;
  for (int32_t id : ids) {
    const std::string& s = bytes[size_t(id)];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      t.byte.push_back(uint8_t(s[d]));
      t.depth.push_back(uint16_t(std::min<size_t>(d + 1, 65535)));
      node_toks.emplace_back();
      path.push_back(int32_t(t.byte.size() - 1));
    }
    node_toks[size_t(path.back())].push_back(id);
    t.max_depth = std::max(t.max_depth, int(s.size()));
    prev = &s;
  }
  const size_t n = t.byte.size();
  t.skip.assign(n, int32_t(n));
  std::vector<int32_t> open;
  for (size_t i = 0; i < n; ++i) {
    while (!open.empty() && t.depth[size_t(open.back())] >= t.depth[i]) {
      t.skip[size_t(open.back())] = int32_t(i);
      open.pop_back();
    }
    open.push_back(int32_t(i));
  }
  t.tok_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    t.tok_begin[i] = int32_t(t.tokens.size());
    t.tokens.insert(t.tokens.end(), node_toks[i].begin(), node_toks[i].end());
  }
  t.tok_begin[n] = int32_t(t.tokens.size());
  return t;
}

// The number of characters of `s` when it is whole UTF-8 characters that a JSON string holds as
// themselves; -1 otherwise. `astral`: one of them is past U+FFFF.
int32_t plain_chars(const std::string& s, bool& astral) {
  astral = false;
  int32_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const int len = utf8_sequence_length(std::string_view(s).substr(i));
    if (len <= 0) return -1;
    const uint32_t cp = utf8_decode(std::string_view(s).substr(i, size_t(len)));
    if (cp < 0x20 || cp == '"' || cp == '\\') return -1;
    astral = astral || cp > 0xFFFF;
    i += size_t(len);
  }
  return n;
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<uint8_t> excluded)
    : bytes_(std::move(bytes)), excluded_(std::move(excluded)) {
  excluded_.resize(bytes_.size(), 0);
  std::vector<int32_t> all, special;
  for (int32_t i = 0; i < size(); ++i) {
    if (bytes_[size_t(i)].empty()) excluded_[size_t(i)] = 1;
    if (excluded_[size_t(i)]) continue;
    all.push_back(i);
    bool astral = false;
    const int32_t chars = plain_chars(bytes_[size_t(i)], astral);
    if (chars > 0) plain_.push_back({chars, i, astral});
    if (chars <= 0 || astral) special.push_back(i);
  }
  std::stable_sort(plain_.begin(), plain_.end(),
                   [](const PlainToken& a, const PlainToken& b) { return a.chars < b.chars; });
  trie_ = build_trie(std::move(all), bytes_);
  special_trie_ = build_trie(std::move(special), bytes_);
}

namespace {

// What each token adds to a text: [ref, id] decoded minus [ref] decoded, as the incremental
// detokenizer sees a token that is not the first (decoders may treat the first token specially,
// e.g. by dropping a leading space).
std::shared_ptr<const TokenVocabulary> build_vocabulary(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  int32_t ref = -1;
  for (int32_t i = 0; i < n && ref < 0; ++i)
    if (!tok.is_special(i) && !tok.decode_bytes({i}, false).empty()) ref = i;
  const std::string ref_bytes = ref >= 0 ? tok.decode_bytes({ref}, false) : std::string();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<uint8_t> excluded(size_t(n), 0);
  for (int32_t i = 0; i < n; ++i) {
    if (tok.is_special(i) || ref < 0) {
      excluded[size_t(i)] = 1;
      continue;
    }
    std::string both = tok.decode_bytes({ref, i}, false);
    if (both.compare(0, ref_bytes.size(), ref_bytes) == 0)
      bytes[size_t(i)] = both.substr(ref_bytes.size());
    else
      bytes[size_t(i)] = tok.decode_bytes({i}, false);
  }
  return std::make_shared<TokenVocabulary>(std::move(bytes), std::move(excluded));
}

// A cheap identity for a tokenizer object at an address (a later tokenizer may reuse it).
uint64_t fingerprint(const Tokenizer& tok) {
  uint64_t h = uint64_t(tok.vocab_size()) * 0x9E3779B97F4A7C15ull;
  const int32_t n = tok.vocab_size();
  for (int32_t k = 0; k < 97 && n > 0; ++k) {
    const int32_t id = int32_t((int64_t(k) * 7919 * 7919) % n);
    for (char c : tok.id_to_token(id)) h = (h ^ uint8_t(c)) * 0x100000001B3ull;
    h = (h ^ uint64_t(tok.is_special(id))) * 0x100000001B3ull;
  }
  return h;
}

// A tokenizer object at an address, and its fingerprint (a later tokenizer may reuse the address).
struct VocabKey {
  const Tokenizer* tok;
  uint64_t print;
  bool operator==(const VocabKey&) const = default;
};

LruCache<VocabKey, std::shared_ptr<const TokenVocabulary>> g_vocabs(4);
// Held while a table is built, so that the first requests of a server, arriving together, build
// it once and not once each.
std::mutex g_vocab_build_mu;

}  // namespace

std::shared_ptr<const TokenVocabulary> TokenVocabulary::of(const Tokenizer& tok) {
  const VocabKey key{&tok, fingerprint(tok)};
  if (auto v = g_vocabs.get(key)) return *v;
  std::lock_guard g(g_vocab_build_mu);
  if (auto v = g_vocabs.get(key)) return *v;
  auto vocab = build_vocabulary(tok);
  g_vocabs.put(key, vocab);
  return vocab;
}

// ---- token grammar ---------------------------------------------------------------------------------

namespace {
// Cached masks per grammar; past it the cache starts over (masks are recomputed on demand).
constexpr size_t kMaskBudgetBytes = size_t(64) << 20;
}  // namespace

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> vocab)
    : vocab_(std::move(vocab)), dfa_(std::move(g)), start_(dfa_.start()) {}

void TokenGrammar::walk(const TokenVocabulary::Trie& t, int32_t state, std::vector<uint32_t>& bits) {
  walk_.assign(size_t(t.max_depth) + 1, GrammarDfa::kDead);
  walk_[0] = state;
  const int32_t n = int32_t(t.byte.size());
  for (int32_t i = 0; i < n;) {
    const int d = t.depth[size_t(i)];
    const int32_t s = dfa_.step(walk_[size_t(d - 1)], t.byte[size_t(i)]);
    if (s == GrammarDfa::kDead) {
      i = t.skip[size_t(i)];
      continue;
    }
    walk_[size_t(d)] = s;
    for (int32_t k = t.tok_begin[size_t(i)]; k < t.tok_begin[size_t(i) + 1]; ++k) {
      const int32_t id = t.tokens[size_t(k)];
      bits[size_t(id >> 5)] |= 1u << (id & 31);
    }
    ++i;
  }
}

const TokenGrammar::Mask& TokenGrammar::mask_locked(int32_t state) {
  if (masks_.size() <= size_t(state)) masks_.resize(size_t(state) + 1);
  if (masks_[size_t(state)]) return *masks_[size_t(state)];
  const size_t bytes = size_t(vocab_->mask_words()) * 4;
  if (mask_bytes_ + bytes > kMaskBudgetBytes) {
    for (auto& m : masks_) m.reset();
    mask_bytes_ = 0;
  }
  auto m = std::make_unique<Mask>();
  m->bits.assign(size_t(vocab_->mask_words()), 0);
  const int32_t pos = dfa_.string_position(state);
  if (pos >= 0) {
    // Inside a string: a plain token keeps the text in it exactly when its characters fit the room
    // left; only the other tokens (quotes, escapes, partial UTF-8) need the walk.
    const StringPosition& sp = dfa_.grammar().string_positions[size_t(pos)];
    for (const TokenVocabulary::PlainToken& p : vocab_->plain_tokens()) {
      if (sp.room >= 0 && p.chars > sp.room) break;
      if (!(sp.bmp_only && p.astral)) m->bits[size_t(p.id >> 5)] |= 1u << (p.id & 31);
    }
    walk(vocab_->special_trie(), state, m->bits);
  } else {
    walk(vocab_->trie(), state, m->bits);
  }
  for (uint32_t w : m->bits) m->count += std::popcount(w);
  mask_bytes_ += bytes;
  masks_[size_t(state)] = std::move(m);
  return *masks_[size_t(state)];
}

int64_t TokenGrammar::or_mask(int32_t state, uint32_t* row, int64_t words) {
  std::lock_guard g(mu_);
  if (state < 0) return 0;
  const Mask& m = mask_locked(state);
  const int64_t n = std::min<int64_t>(words, int64_t(m.bits.size()));
  for (int64_t w = 0; w < n; ++w) row[w] |= m.bits[size_t(w)];
  return m.count;
}

int32_t TokenGrammar::advance(int32_t state, int32_t token) {
  std::lock_guard g(mu_);
  if (token < 0 || token >= vocab_->size() || vocab_->excluded(token)) return GrammarDfa::kDead;
  for (char c : vocab_->bytes(token)) {
    state = dfa_.step(state, uint8_t(c));
    if (state == GrammarDfa::kDead) break;
  }
  return state;
}

bool TokenGrammar::accepts(int32_t state) {
  std::lock_guard g(mu_);
  return state >= 0 && dfa_.accepts(state);
}

bool TokenGrammar::complete(int32_t state) {
  std::lock_guard g(mu_);
  return state >= 0 && dfa_.complete(state);
}

size_t TokenGrammar::dfa_states() {
  std::lock_guard g(mu_);
  return dfa_.num_states();
}

// ---- compile cache --------------------------------------------------------------------------------

namespace {

struct GrammarKey {
  const TokenVocabulary* vocab;  // alive while the entry is: its grammar holds it
  ConstraintKind kind;
  std::string source;
  bool operator==(const GrammarKey&) const = default;
};

// With kMaskBudgetBytes each, the grammars the cache keeps hold at most 1 GiB of masks.
LruCache<GrammarKey, std::shared_ptr<TokenGrammar>> g_grammars(16);

std::atomic<uint64_t> g_compiles{0};

}  // namespace

uint64_t grammar_compiles() {
  return g_compiles.load(std::memory_order_relaxed);
}

std::string compile_grammar(ConstraintKind kind, std::string_view source, Grammar& out) {
  g_compiles.fetch_add(1, std::memory_order_relaxed);
  switch (kind) {
    case ConstraintKind::json_object: return compile_json_object(out);
    case ConstraintKind::json_schema: return compile_json_schema(source, out);
    case ConstraintKind::regex: return compile_regex(source, out);
    case ConstraintKind::none: break;
  }
  return "no constraint to compile";
}

Result<std::shared_ptr<TokenGrammar>> compile_constraint(ConstraintKind kind, std::string_view source,
                                                         const std::shared_ptr<const TokenVocabulary>& vocab,
                                                         std::shared_ptr<const Grammar> built) {
  GrammarKey key{vocab.get(), kind, std::string(source)};
  if (auto cached = g_grammars.get(key)) return *cached;
  if (built == nullptr) {
    auto g = std::make_shared<Grammar>();
    if (std::string err = compile_grammar(kind, source, *g); !err.empty()) return invalid_argument(err);
    built = std::move(g);
  }
  auto tg = std::make_shared<TokenGrammar>(std::move(built), vocab);
  if (tg->start() == GrammarDfa::kDead) return invalid_argument("the constraint allows no output at all");
  g_grammars.put(std::move(key), tg);
  return tg;
}

Result<std::shared_ptr<TokenGrammar>> compile_constraint(ConstraintKind kind, std::string_view source,
                                                         const Tokenizer& tok,
                                                         std::shared_ptr<const Grammar> built) {
  return compile_constraint(kind, source, TokenVocabulary::of(tok), std::move(built));
}

// ---- matcher ---------------------------------------------------------------------------------------

int64_t Matcher::fill_mask(uint32_t* row, int64_t words, const std::vector<int32_t>& stop_ids) const {
  std::memset(row, 0, size_t(words) * 4);
  int64_t n = g_->or_mask(state_, row, words);
  if (g_->accepts(state_)) {
    for (int32_t t : stop_ids) {
      if (t < 0 || t >= words * 32) continue;
      if (!((row[t >> 5] >> (t & 31)) & 1u)) ++n;
      row[t >> 5] |= 1u << (t & 31);
    }
  }
  return n;
}

bool Matcher::advance(int32_t token) {
  const int32_t s = g_->advance(state_, token);
  if (s == GrammarDfa::kDead) return false;
  state_ = s;
  return true;
}

}  // namespace astrai::structured
