#include "src/engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace astrai {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool keep_match) : keep_match_(keep_match) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view piece, bool may_match) {
  if (matched_) return {};
  held_.append(piece);
  if (stops_.empty()) return std::exchange(held_, {});
  if (!may_match) {
    blind_ = held_.size();
    return release();
  }
  return match();
}

std::string StopMatcher::match() {
  // The match that completes first wins, as if the text had arrived one byte at a time: generation
  // stops the moment any stop string has appeared, so a longer stop string that would only complete
  // later never counts. Ties (same end): the one that starts earlier, i.e. the longer one.
  size_t best = std::string::npos, best_end = std::string::npos;
  for (const auto& s : stops_) {
    // Only an occurrence that ends past the blind bytes counts.
    const size_t at = held_.find(s, blind_ + 1 > s.size() ? blind_ + 1 - s.size() : 0);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
      matched_string_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, keep_match_ ? best_end : best);
    held_.clear();
    return out;
  }
  return release();
}

std::string StopMatcher::release() {
  // Invariant: no stop string ends in held_ past its blind bytes. Keep the longest suffix that is a proper
  // prefix of some stop string; it is at most max(len) - 1 bytes, so the work per piece is bounded.
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, held_.size());
    for (size_t k = max_k; k > keep; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, out.size());
  blind_ = blind_ > out.size() ? blind_ - out.size() : 0;
  return out;
}

std::string StopMatcher::finish() {
  if (matched_) return {};
  return std::exchange(held_, {});
}

}  // namespace astrai
