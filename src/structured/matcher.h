// Runs a Grammar (grammar.h) over bytes as a DFA built lazily, one transition at a time.
//
// A configuration is a call stack: frames (rule, state, parent frame), interned so that equal
// stacks share an id. A DFA state is the set of configurations whose top frame waits for a byte
// (its state has byte edges), plus whether the input so far is a complete sentence. Stepping on a
// byte advances every configuration along its matching byte edges and closes the result under
// epsilon edges, calls (push the callee's start) and returns (a final state pops to the parent,
// whose frame already holds the state after the call). JSON's grammar is deterministic enough that
// the sets stay small; anyOf keeps one configuration per live alternative.
//
// Not thread-safe: the owner (TokenGrammar) serialises access.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "src/structured/grammar.h"

namespace astrai::structured {

class GrammarDfa {
 public:
  static constexpr int32_t kDead = -1;
  // Stacks deeper than this are dropped (a recursive schema nested this deep is not generated).
  static constexpr int32_t kMaxDepth = 128;

  explicit GrammarDfa(Grammar g);
  // Shares `g` (a request's grammar compiled when it was read; never null).
  explicit GrammarDfa(std::shared_ptr<const Grammar> g);

  int32_t start() const { return start_; }
  int32_t step(int32_t state, uint8_t byte);
  // The bytes so far form a complete sentence.
  bool accepts(int32_t state) const { return states_[size_t(state)].accept; }
  // Complete, and no byte may follow.
  bool complete(int32_t state) const {
    const State& s = states_[size_t(state)];
    return s.accept && s.configs.empty();
  }
  size_t num_states() const { return states_.size(); }
  const Grammar& grammar() const { return *g_; }
  // The Grammar::string_positions entry `state` stands for: every configuration of the state waits
  // at that one position of one string (same rule, same caller). -1 otherwise.
  int32_t string_position(int32_t state) const;

 private:
  struct Frame {
    int32_t rule, state, parent, depth;
  };
  struct FrameKey {
    int32_t rule, state, parent;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& k) const {
      return size_t(uint64_t(uint32_t(k.rule)) * 0x9E3779B97F4A7C15ull ^ uint64_t(uint32_t(k.state)) << 20 ^
                    uint64_t(uint32_t(k.parent)) * 0xC2B2AE3D27D4EB4Full);
    }
  };
  struct State {
    std::vector<int32_t> configs;  // sorted frame ids
    bool accept = false;
    std::unique_ptr<int32_t[]> next;  // 256 transitions once the first is asked for (-2: unknown)
  };
  struct ConfigsHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = v.size();
      for (int32_t x : v) h = (h ^ uint64_t(uint32_t(x))) * 0x100000001B3ull;
      return size_t(h);
    }
  };

  int32_t frame(int32_t rule, int32_t state, int32_t parent);
  // Adds the scanning configurations reachable from frame f without input to `out`.
  void close(int32_t f, std::vector<int32_t>& out, bool& accept);
  int32_t intern(std::vector<int32_t> configs, bool accept);

  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> frames_;
  std::unordered_map<FrameKey, int32_t, FrameKeyHash> frame_ids_;
  std::vector<State> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, ConfigsHash> state_ids_[2];  // by accept
  int32_t start_ = kDead;
  size_t tables_ = 0;  // states with a transition table (bounded: 1 KiB each)
  // Scratch for close().
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> todo_;
};

}  // namespace astrai::structured
