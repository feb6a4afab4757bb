#include "src/structured/matcher.h"

#include <algorithm>
#include <utility>

namespace astrai::structured {

namespace {
// Transition tables kept (1 KiB each); states past it step without a table, correct but slower.
constexpr size_t kMaxTables = 1 << 15;
constexpr int32_t kUnknown = -2;
}  // namespace

GrammarDfa::GrammarDfa(Grammar g) : GrammarDfa(std::make_shared<const Grammar>(std::move(g))) {}

GrammarDfa::GrammarDfa(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  std::vector<int32_t> configs;
  bool accept = false;
  if (g_->root >= 0) close(frame(g_->root, g_->rules[size_t(g_->root)].start, -1), configs, accept);
  start_ = intern(std::move(configs), accept);
}

int32_t GrammarDfa::frame(int32_t rule, int32_t state, int32_t parent) {
  const FrameKey k{rule, state, parent};
  auto it = frame_ids_.find(k);
  if (it != frame_ids_.end()) return it->second;
  const int32_t id = int32_t(frames_.size());
  frames_.push_back({rule, state, parent, parent < 0 ? 1 : frames_[size_t(parent)].depth + 1});
  frame_ids_.emplace(k, id);
  return id;
}

void GrammarDfa::close(int32_t f0, std::vector<int32_t>& out, bool& accept) {
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  todo_.clear();
  todo_.push_back(f0);
  while (!todo_.empty()) {
    const int32_t f = todo_.back();
    todo_.pop_back();
    if (seen_.size() <= size_t(f)) seen_.resize(std::max(size_t(f) + 1, seen_.size() * 2), 0);
    if (seen_[size_t(f)] == stamp_) continue;
    seen_[size_t(f)] = stamp_;
    const Frame fr = frames_[size_t(f)];
    const Rule& r = g_->rules[size_t(fr.rule)];
    for (int32_t t : r.eps_closure(fr.state)) {
      if (r.scans[size_t(t)]) out.push_back(t == fr.state ? f : frame(fr.rule, t, fr.parent));
      for (const Edge& e : r.out[size_t(t)]) {
        if (e.kind != Edge::Kind::call) continue;
        if (fr.depth >= kMaxDepth) continue;
        const int32_t after = frame(fr.rule, e.to, fr.parent);
        todo_.push_back(frame(e.rule, g_->rules[size_t(e.rule)].start, after));
      }
      if (r.final[size_t(t)]) {
        if (fr.parent < 0)
          accept = true;
        else
          todo_.push_back(fr.parent);
      }
    }
  }
}

int32_t GrammarDfa::intern(std::vector<int32_t> configs, bool accept) {
  std::sort(configs.begin(), configs.end());
  configs.erase(std::unique(configs.begin(), configs.end()), configs.end());
  if (configs.empty() && !accept) return kDead;
  auto& ids = state_ids_[accept ? 1 : 0];
  auto it = ids.find(configs);
  if (it != ids.end()) return it->second;
  const int32_t id = int32_t(states_.size());
  State s;
  s.configs = configs;
  s.accept = accept;
  states_.push_back(std::move(s));
  ids.emplace(std::move(configs), id);
  return id;
}

int32_t GrammarDfa::string_position(int32_t state) const {
  if (state < 0) return -1;
  const State& s = states_[size_t(state)];
  if (s.configs.empty() || s.accept) return -1;
  const Frame& f0 = frames_[size_t(s.configs[0])];
  const int32_t tag = g_->rules[size_t(f0.rule)].tag[size_t(f0.state)];
  if (tag < 0) return -1;
  for (int32_t c : s.configs) {
    const Frame& f = frames_[size_t(c)];
    if (f.rule != f0.rule || f.parent != f0.parent || g_->rules[size_t(f.rule)].tag[size_t(f.state)] != tag)
      return -1;
  }
  return tag;
}

int32_t GrammarDfa::step(int32_t state, uint8_t byte) {
  if (state < 0) return kDead;
  {
    const State& s = states_[size_t(state)];
    if (s.next && s.next[byte] != kUnknown) return s.next[byte];
  }
  std::vector<int32_t> next;
  bool accept = false;
  // Copy: close() may grow frames_ and intern() states_.
  const std::vector<int32_t> configs = states_[size_t(state)].configs;
  for (int32_t f : configs) {
    const Frame fr = frames_[size_t(f)];
    for (const Edge& e : g_->rules[size_t(fr.rule)].out[size_t(fr.state)])
      if (e.kind == Edge::Kind::byte && e.lo <= byte && byte <= e.hi)
        close(frame(fr.rule, e.to, fr.parent), next, accept);
  }
  const int32_t to = intern(std::move(next), accept);
  State& s = states_[size_t(state)];
  if (!s.next && tables_ < kMaxTables) {
    s.next.reset(new int32_t[256]);
    std::fill(s.next.get(), s.next.get() + 256, kUnknown);
    ++tables_;
  }
  if (s.next) s.next[byte] = to;
  return to;
}

}  // namespace astrai::structured
