// From a byte grammar to tokens: which vocabulary tokens may come next, as the bit set the
// backend's sample op reads (src/backend/backend.h, SampleBatch::mask).
//
// The vocabulary's token bytes are laid out as a trie in preorder (TokenVocabulary). The allowed
// set of a grammar state is one walk over that trie, stepping the grammar's lazy DFA
// (matcher.h) byte by byte and skipping every subtree whose prefix is already dead; the result is
// cached per DFA state, so a state seen before costs one copy of ceil(V / 32) words. Compiled
// grammars are cached by (vocabulary, kind, source), so a schema sent again reuses its DFA and
// masks.
//
// Thread-safety: a TokenGrammar may be shared by any number of requests and threads (its lazy
// tables are behind a mutex); Matcher is a value owned by one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"
#include "src/engine/request.h"
#include "src/structured/matcher.h"

namespace astrai {
class Tokenizer;
}

namespace astrai::structured {

class TokenVocabulary {
 public:
  // bytes[i]: what token i adds to the text; excluded[i]: never allowed by a grammar (special
  // tokens, and tokens that add no bytes). Stop tokens are the caller's (Matcher::fill_mask).
  TokenVocabulary(std::vector<std::string> bytes, std::vector<uint8_t> excluded);
  // The vocabulary of `tok` (built once per tokenizer; the build decodes every token).
  static std::shared_ptr<const TokenVocabulary> of(const Tokenizer& tok);

  int32_t size() const { return int32_t(bytes_.size()); }
  int32_t mask_words() const { return (size() + 31) / 32; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool excluded(int32_t id) const { return excluded_[size_t(id)] != 0; }

  // The trie in preorder: node i reads byte_[i] at depth depth_[i] (1-based); skip_[i] is the
  // first node after its subtree; the tokens whose bytes end at node i are
  // node_tokens_[tok_begin_[i], tok_begin_[i + 1]).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<int32_t> skip;
    std::vector<int32_t> tok_begin;
    std::vector<int32_t> tokens;
    int max_depth = 0;
  };
  const Trie& trie() const { return trie_; }

  // For masks inside a JSON string (Grammar::string_positions): the plain tokens, whose bytes are
  // whole UTF-8 characters that a JSON string holds as themselves (no '"', '\\', control
  // characters), by their number of characters; and the trie of all the other tokens, plus the
  // plain ones with a character past U+FFFF (so that a BMP-only string can walk them).
  struct PlainToken {
    int32_t chars;
    int32_t id;
    bool astral;
  };
  const std::vector<PlainToken>& plain_tokens() const { return plain_; }  // by chars, ascending
  const Trie& special_trie() const { return special_trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> excluded_;
  Trie trie_;
  std::vector<PlainToken> plain_;
  Trie special_trie_;
};

class TokenGrammar {
 public:
  TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> vocab);

  int32_t start() const { return start_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  // ORs the tokens allowed in `state` into row[0, words) (words may exceed the vocabulary's; the
  // tokens past it are never allowed). Returns how many tokens are allowed.
  int64_t or_mask(int32_t state, uint32_t* row, int64_t words);
  // The state after `token` (GrammarDfa::kDead when the token is not allowed).
  int32_t advance(int32_t state, int32_t token);
  bool accepts(int32_t state);
  bool complete(int32_t state);
  size_t dfa_states();

 private:
  struct Mask {
    std::vector<uint32_t> bits;
    int64_t count = 0;
  };
  const Mask& mask_locked(int32_t state);
  // Sets the bits of the tokens of `t` that the DFA takes from `state`.
  void walk(const TokenVocabulary::Trie& t, int32_t state, std::vector<uint32_t>& bits);

  std::shared_ptr<const TokenVocabulary> vocab_;
  std::mutex mu_;
  GrammarDfa dfa_;
  int32_t start_;
  std::vector<std::unique_ptr<Mask>> masks_;  // by DFA state
  size_t mask_bytes_ = 0;
  std::vector<int32_t> walk_;  // DFA state per trie depth during a walk
};

// The byte grammar of a constraint (json_schema.h's compilers by kind): "" or the reason.
std::string compile_grammar(ConstraintKind kind, std::string_view source, Grammar& out);
// How many times compile_grammar has run in this process (tests: what a cache or a grammar carried
// with a request saved).
uint64_t grammar_compiles();

// Compiles (or finds in the cache) the grammar of a constraint over `tok`'s vocabulary; `built`, when
// not null, is the byte grammar of `source` already compiled (ConstraintSpec::grammar), shared
// instead of compiling the source again. A schema or pattern that cannot be compiled is
// invalid_argument with the reason ("schema.properties.age: the keyword 'multipleOf' is not
// supported").
Result<std::shared_ptr<TokenGrammar>> compile_constraint(ConstraintKind kind, std::string_view source,
                                                         const Tokenizer& tok,
                                                         std::shared_ptr<const Grammar> built = nullptr);
// The same over a given vocabulary (tests, benchmarks).
Result<std::shared_ptr<TokenGrammar>> compile_constraint(ConstraintKind kind, std::string_view source,
                                                         const std::shared_ptr<const TokenVocabulary>& vocab,
                                                         std::shared_ptr<const Grammar> built = nullptr);

// One sequence's position in a grammar. Copyable (n > 1 choices fork it).
class Matcher {
 public:
  Matcher() = default;
  explicit Matcher(std::shared_ptr<TokenGrammar> g) : g_(std::move(g)), state_(g_ ? g_->start() : -1) {}
  bool active() const { return g_ != nullptr; }
  // Writes the sample op's mask row: the grammar's tokens, plus `stop_ids` when the text so far is
  // complete. Returns the number of allowed tokens.
  int64_t fill_mask(uint32_t* row, int64_t words, const std::vector<int32_t>& stop_ids) const;
  // Moves past `token`; false when the grammar does not allow it.
  bool advance(int32_t token);
  bool accepts() const { return g_->accepts(state_); }
  // Nothing may follow: the constrained text is finished.
  bool complete() const { return g_->complete(state_); }

 private:
  std::shared_ptr<TokenGrammar> g_;
  int32_t state_ = -1;
};

}  // namespace astrai::structured
