#include "src/engine/stop_strings.h"

#include <catch2/catch.hpp>
#include <random>

#include "tools/test_util.h"

using astrai::StopMatcher;

namespace {

// Feeds text in random pieces, the first `blind_pieces` with may_match false (a request's first
// tokens before min_tokens); returns everything emitted. `blind` gets the bytes fed that way.
std::string run(StopMatcher& m, const std::string& text, std::mt19937_64& rng, int blind_pieces,
                size_t& blind) {
  std::string out;
  size_t i = 0;
  blind = 0;
  for (int piece = 0; i < text.size() && !m.matched(); ++piece) {
    const size_t len = std::min(text.size() - i, size_t(1 + rng() % 4));
    const bool may_match = piece >= blind_pieces;
    if (!may_match) blind += len;
    out += m.push(std::string_view(text).substr(i, len), may_match);
    i += len;
  }
  out += m.finish();
  return out;
}

// Reference, byte by byte: the first prefix of the text longer than `blind` bytes that ends with a
// stop string decides; the output is cut at the start of that stop string (the longest one when
// several end there), or after it with keep.
std::string reference(const std::string& text, const std::vector<std::string>& stops, bool& matched,
                      size_t blind = 0, bool keep = false) {
  for (size_t end = blind + 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const auto& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
        start = std::min(start, end - s.size());
    if (start != std::string::npos) {
      matched = true;
      return text.substr(0, keep ? end : start);
    }
  }
  matched = false;
  return text;
}

}  // namespace

TEST_CASE("stop strings are trimmed across arbitrary token boundaries", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const std::string alphabet = "abc <>|\n";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const size_t ns = 1 + rng() % 3;
    for (size_t s = 0; s < ns; ++s) {
      std::string stop;
      const size_t len = 1 + rng() % 4;
      for (size_t i = 0; i < len; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    const bool keep = rng() % 2;
    const int blind_pieces = rng() % 3 == 0 ? int(rng() % 5) : 0;
    StopMatcher m(stops, keep);
    size_t blind = 0;
    const std::string got = run(m, text, rng, blind_pieces, blind);
    bool want_match = false;
    const std::string want = reference(text, stops, want_match, blind, keep);
    INFO("text '" << text << "', keep " << keep << ", blind " << blind);
    REQUIRE(got == want);
    REQUIRE(m.matched() == want_match);
    if (want_match && !keep && blind == 0) REQUIRE(text.find(m.matched_string()) == want.size());
    if (want_match && keep) REQUIRE(want.size() >= m.matched_string().size());
    if (want_match && keep)
      REQUIRE(want.compare(want.size() - m.matched_string().size(), std::string::npos, m.matched_string()) ==
              0);
  }
}

TEST_CASE("without stop strings every piece passes through at once", "[unit]") {
  StopMatcher m;
  REQUIRE(m.push("hello") == "hello");
  REQUIRE(m.push(" world") == " world");
  REQUIRE(m.finish().empty());
}

TEST_CASE("a possible stop-string prefix is held back until it is decided", "[unit]") {
  StopMatcher m({"</s>"});
  REQUIRE(m.push("abc<") == "abc");
  REQUIRE(m.push("/") == "");
  REQUIRE(m.push("x") == "</x");  // not a stop string after all: released
  REQUIRE(m.push("done</") == "done");
  REQUIRE(m.push("s>tail") == "");
  REQUIRE(m.matched());
  REQUIRE(m.push("more") == "");
}

TEST_CASE("include_stop_str_in_output keeps the stop string; before min_tokens none ends the text",
          "[unit]") {
  StopMatcher keep({"END"}, /*keep_match=*/true);
  REQUIRE(keep.push("abcE") == "abc");
  REQUIRE(keep.push("ND!") == "END");
  REQUIRE(keep.matched());
  StopMatcher m({"ab"});
  REQUIRE(m.push("xab", /*may_match=*/false) == "xab");  // an early stop string is text
  REQUIRE(m.push("a", false) == "");                     // a possible start is still held
  REQUIRE(m.push("b") == "");                            // and completes once matching is on
  REQUIRE(m.matched());
  StopMatcher n({"ab", "xaby"});
  REQUIRE(n.push("xab", /*may_match=*/false) == "");  // held as a start of "xaby", "ab" inside it blind
  REQUIRE(n.push("z") == "xabz");                     // the blind "ab" never counts
  REQUIRE_FALSE(n.matched());
}
