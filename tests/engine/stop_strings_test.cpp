#include "src/engine/stop_strings.h"

#include <catch2/catch.hpp>
#include <random>

#include "tools/test_util.h"

using astrai::StopMatcher;

namespace {

// Feeds text in random pieces; returns everything emitted.
std::string run(StopMatcher& m, const std::string& text, std::mt19937_64& rng) {
  std::string out;
  size_t i = 0;
  while (i < text.size() && !m.matched()) {
    const size_t len = std::min(text.size() - i, size_t(1 + rng() % 4));
    out += m.push(std::string_view(text).substr(i, len));
    i += len;
  }
  out += m.finish();
  return out;
}

// Reference, byte by byte: the first prefix of the text that ends with a stop string decides; the
// output is cut at the start of that stop string (the longest one when several end there).
std::string reference(const std::string& text, const std::vector<std::string>& stops, bool& matched) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const auto& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
        start = std::min(start, end - s.size());
    if (start != std::string::npos) {
      matched = true;
      return text.substr(0, start);
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
    StopMatcher m(stops);
    bool want_match = false;
    const std::string want = reference(text, stops, want_match);
    INFO("text '" << text << "'");
    REQUIRE(run(m, text, rng) == want);
    REQUIRE(m.matched() == want_match);
    if (want_match) REQUIRE(text.find(m.matched_string()) == want.size());
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
