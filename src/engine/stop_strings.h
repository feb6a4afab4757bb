// Incremental stop-string matching over streamed text. Text arrives in pieces (one per token) and a
// stop string may straddle pieces, so the matcher holds back the longest tail of the text that is
// still a prefix of some stop string; everything before it is safe to emit. On a match the output is
// cut just before the stop string (or just after it, keep_match). The first stop string to complete
// wins, so the result does not depend on how the text was split into pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace astrai {

class StopMatcher {
 public:
  // keep_match: the matched stop string stays in the text (vLLM's include_stop_str_in_output).
  explicit StopMatcher(std::vector<std::string> stops = {}, bool keep_match = false);

  // Feeds the next piece; returns the text that can be emitted now. After a match, returns the text
  // up to the match (through it with keep_match) and matched() is true; further pushes return "".
  // may_match false (before a request's min_tokens): a stop string that ends in this piece does not
  // count; the text that could still begin one is held back as usual.
  std::string push(std::string_view piece, bool may_match = true);
  // End of generation: releases the held-back tail (no stop string can complete any more).
  std::string finish();

  bool matched() const { return matched_; }
  const std::string& matched_string() const { return matched_string_; }

 private:
  std::string match();    // a stop string in held_: the text before it (or through it); else release()
  std::string release();  // the text no stop string can start in, leaving the rest held

  std::vector<std::string> stops_;
  std::string held_;  // text not yet emitted: a possible start of a stop string
  size_t blind_ = 0;  // held_'s first bytes, pushed with may_match false: no match ends in them
  bool keep_match_ = false;
  bool matched_ = false;
  std::string matched_string_;
};

}  // namespace astrai
