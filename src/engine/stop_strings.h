// Incremental stop-string matching over streamed text. Text arrives in pieces (one per token) and a
// stop string may straddle pieces, so the matcher holds back the longest tail of the text that is
// still a prefix of some stop string; everything before it is safe to emit. On a match the output is
// cut just before the stop string (the stop string itself is never emitted). The first stop string
// to complete wins, so the result does not depend on how the text was split into pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace astrai {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Feeds the next piece; returns the text that can be emitted now. After a match, returns the text
  // up to the match and matched() is true; further pushes return "".
  std::string push(std::string_view piece);
  // End of generation: releases the held-back tail (no stop string can complete any more).
  std::string finish();

  bool matched() const { return matched_; }
  const std::string& matched_string() const { return matched_string_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text not yet emitted: a possible start of a stop string
  bool matched_ = false;
  std::string matched_string_;
};

}  // namespace astrai
