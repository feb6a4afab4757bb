// Reasoning token counts (usage.completion_tokens_details.reasoning_tokens): the splitter, fed one
// token's text at a time, counts the tokens whose text lies wholly inside the think block, checked
// against a reference that finds the block in the whole text and tests each token's byte range.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "net/reasoning_parser.h"

using namespace astrai::net;

namespace {

int count(const std::vector<std::string>& tokens, bool starts_inside) {
  ReasoningSplitter s(starts_inside);
  for (size_t i = 0; i < tokens.size(); ++i) s.feed(tokens[i], i + 1 == tokens.size(), 1);
  return s.reasoning_tokens();
}

// The think block's byte range [begin, end) in the whole text, by the documented rule: after
// whitespace and "<think>" at the start (or from the start when the prompt left the block open), up
// to the first "</think>" (or the end).
std::pair<size_t, size_t> block(const std::string& text, bool starts_inside) {
  size_t p = 0;
  while (p < text.size() && std::string(" \t\r\n\f\v").find(text[p]) != std::string::npos) ++p;
  size_t begin = 0;
  if (text.compare(p, 7, "<think>") == 0)
    begin = p + 7;
  else if (!starts_inside)
    return {0, 0};
  const size_t close = text.find("</think>", begin);
  return {begin, close == std::string::npos ? text.size() : close};
}

int reference_count(const std::vector<std::string>& tokens, bool starts_inside) {
  std::string text;
  for (const auto& t : tokens) text += t;
  const auto [begin, end] = block(text, starts_inside);
  int n = 0;
  size_t at = 0;
  for (const auto& t : tokens) {
    if (at >= begin && at + t.size() <= end && begin < end) ++n;
    at += t.size();
  }
  return n;
}

}  // namespace

TEST_CASE("reasoning tokens: the tokens between the markers, not the markers or the answer", "[unit]") {
  CHECK(count({"\n", "<think>", "Let", " me", "</think>", "Yes", "."}, false) == 2);
  CHECK(count({"<think>", "a", "b", "c"}, false) == 3);              // never closed: all of it
  CHECK(count({"Hello", " <think>", "x", "</think>"}, false) == 0);  // no block at the start
  CHECK(count({"a", "b", "</think>", "c"}, true) == 2);              // the prompt left the block open
  CHECK(count({"\n", "<think>", "a", "</think>"}, true) == 1);       // an opening marker anyway
  CHECK(count({"\n", "<th", "x", "</think>"}, true) == 3);           // not a marker after all: reasoning
  CHECK(count({"\n", "<th", "x"}, false) == 0);
}

TEST_CASE("reasoning tokens: a held-back possible marker counts once it turns out to be text", "[unit]") {
  CHECK(count({"<think>", "a", "<", "/", "b", "</think>"}, false) == 4);
  CHECK(count({"<think>", "a", "<", "/think>", "b"}, false) == 1);
  CHECK(count({"<think>", "a<", "/think>", "b"}, false) == 0);  // "a<" holds part of the marker
  CHECK(count({"<think>", "<", "b</think>"}, false) == 1);
  CHECK(count({"<think>", "a", "</thi"}, false) == 2);  // the output ended: it was reasoning
}

TEST_CASE("reasoning tokens match the whole-text reference for random token cuts", "[unit]") {
  const std::vector<std::string> pieces = {"<think>", "</think>", "<",  "</", "think>", "th",  ">",
                                           "a",       " ",        "\n", "b<", "</thi",  "nk>", "x</think>y"};
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<std::string> tokens(size_t(rng() % 9));
    for (auto& t : tokens) t = pieces[rng() % pieces.size()];
    const bool inside = rng() % 2;
    std::string shown;
    for (const auto& t : tokens) shown += "[" + t + "]";
    INFO(shown << (inside ? " starting inside" : ""));
    REQUIRE(count(tokens, inside) == reference_count(tokens, inside));
  }
}

TEST_CASE("reasoning tokens: append and take (non-streaming) count and split as streaming does", "[unit]") {
  ReasoningSplitter s(false);
  for (const char* t : {"<think>", "a", "<", "</think>", "b"}) s.append(t, 1);
  CHECK(s.reasoning_tokens() == 2);  // "a" and "<": the "<" turned out to be text
  const ReasoningSplit whole = s.take();
  CHECK(whole.reasoning == "a<");
  CHECK(whole.content == "b");

  ReasoningSplitter unfinished(false);
  for (const char* t : {"<think>", "a", "<"}) unfinished.append(t, 1);
  CHECK(unfinished.reasoning_tokens() == 1);   // "<" may still start "</think>"
  CHECK(unfinished.take().reasoning == "a<");  // the output ended: it was reasoning
  CHECK(unfinished.reasoning_tokens() == 2);
}
