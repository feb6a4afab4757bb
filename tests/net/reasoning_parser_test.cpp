// The reasoning splitter against a direct whole-string reference, over every way of cutting the
// output into stream chunks.
#include "net/reasoning_parser.h"

#include <catch2/catch.hpp>
#include <random>

#include "tools/test_util.h"

using namespace astrai::net;

namespace {

// The rule, written on the whole output: leading whitespace then "<think>" opens the block (or the
// prompt did); the first "</think>" inside it closes it; everything else is answer.
ReasoningSplit reference(const std::string& text, bool starts_inside) {
  const size_t first = text.find_first_not_of(" \t\r\n\f\v");
  std::string rest;
  if (first != std::string::npos && text.compare(first, 7, "<think>") == 0)
    rest = text.substr(first + 7);
  else if (starts_inside)
    rest = text;
  else
    return {"", text};
  const size_t close = rest.find("</think>");
  if (close == std::string::npos) return {rest, ""};
  return {rest.substr(0, close), rest.substr(close + 8)};
}

// Streams `text` cut at the given offsets (ascending, inside the text); checks that reasoning never
// follows content within the output.
ReasoningSplit stream(const std::string& text, const std::vector<size_t>& cuts, bool starts_inside) {
  ReasoningSplitter s(starts_inside);
  ReasoningSplit all;
  size_t from = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t to = i < cuts.size() ? cuts[i] : text.size();
    const bool last = i == cuts.size();
    ReasoningSplit part = s.feed(std::string_view(text).substr(from, to - from), last);
    if (!part.reasoning.empty()) CHECK(all.content.empty());
    all.reasoning += part.reasoning;
    all.content += part.content;
    from = to;
  }
  return all;
}

void check_every_cut(const std::string& text, bool starts_inside) {
  const ReasoningSplit want = reference(text, starts_inside);
  const size_t n = text.size();
  INFO("text: '" << text << "', starts_inside " << starts_inside);
  if (n <= 14) {
    // Every composition of the text into chunks: bit i set = a cut after byte i + 1.
    for (uint32_t mask = 0; mask < (1u << (n > 0 ? n - 1 : 0)); ++mask) {
      std::vector<size_t> cuts;
      for (size_t i = 0; i + 1 < n; ++i)
        if (mask & (1u << i)) cuts.push_back(i + 1);
      const ReasoningSplit got = stream(text, cuts, starts_inside);
      INFO("cut mask " << mask);
      REQUIRE(got.reasoning == want.reasoning);
      REQUIRE(got.content == want.content);
    }
    return;
  }
  // Longer texts: every pair of cuts (which includes every single cut and one-byte chunks around
  // each marker byte), plus byte by byte.
  for (size_t a = 0; a <= n; ++a)
    for (size_t b = a; b <= n; ++b) {
      std::vector<size_t> cuts;
      if (a > 0 && a < n) cuts.push_back(a);
      if (b > a && b < n) cuts.push_back(b);
      const ReasoningSplit got = stream(text, cuts, starts_inside);
      INFO("cuts " << a << ", " << b);
      REQUIRE(got.reasoning == want.reasoning);
      REQUIRE(got.content == want.content);
    }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < n; ++i) bytes.push_back(i);
  const ReasoningSplit got = stream(text, bytes, starts_inside);
  CHECK(got.reasoning == want.reasoning);
  CHECK(got.content == want.content);
}

}  // namespace

TEST_CASE("reasoning and answer are split the same way however the output is cut into chunks", "[unit]") {
  const std::vector<std::string> texts = {
      "<think>\nplan it\n</think>\n\nThe answer is 4.",
      "<think>ab</think>cd",
      "  \n<think>x</think>y",
      "no thinking here",
      "<think>never closed",
      "</think>answer",
      "a<think>b</think>c",
      "<think></think>",
      "<think><think>x</think></think>",
      "<thin</thi</think>k",
      "<",
      "",
      " \n ",
      "<think>\nreason\n</think>\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
  };
  for (const auto& t : texts) {
    check_every_cut(t, false);
    check_every_cut(t, true);
  }
}

TEST_CASE("random mixes of marker pieces split like the reference at every cut", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> pieces = {"<think>", "</think>", "<", "</", "<th", "</thi", "think",
                                           ">",       "a",        "ü", " ",  "\n",  "k>",    "/"};
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const size_t parts = 1 + rng() % 6;
    for (size_t p = 0; p < parts; ++p) text += pieces[rng() % pieces.size()];
    check_every_cut(text, rng() % 2 == 0);
  }
}

TEST_CASE("reasoning streams as it comes: only a possible marker is held back", "[unit]") {
  ReasoningSplitter s(/*starts_inside=*/true);
  CHECK(s.push("step one").reasoning == "step one");
  ReasoningSplit r = s.push(", two</th");
  CHECK(r.reasoning == ", two");
  r = s.push("ink>\n\nAnswer");
  CHECK(r.reasoning.empty());
  CHECK(r.content == "\n\nAnswer");
  r = s.push(" and <think>more</think>");  // after the block, markers are answer text
  CHECK(r.content == " and <think>more</think>");

  ReasoningSplitter a(/*starts_inside=*/false);
  CHECK(a.push("Hello").content == "Hello");  // no block at the start: answer at once
  ReasoningSplitter b(false);
  CHECK(b.push("\n<th").content.empty());  // could still open a block
  r = b.push("ink>why");
  CHECK(r.reasoning == "why");
  CHECK(r.content.empty());
  r = b.finish();
  CHECK(r.reasoning.empty());
  CHECK(r.content.empty());
}

TEST_CASE("a prompt that ends inside a think block starts the output in reasoning", "[unit]") {
  CHECK_FALSE(reasoning_mode(ReasoningParser::none, "<think>\n").enabled);
  CHECK(reasoning_mode(ReasoningParser::qwen3, "<|im_start|>assistant\n<think>\n").starts_inside);
  CHECK_FALSE(reasoning_mode(ReasoningParser::qwen3, "<|im_start|>assistant\n").starts_inside);
  CHECK_FALSE(reasoning_mode(ReasoningParser::qwen3, "assistant\n<think>\n\n</think>\n\n").starts_inside);
  CHECK(reasoning_mode(ReasoningParser::qwen3, "x").enabled);
  // DeepSeek-R1: reasoning until </think> unless the prompt closed the block.
  CHECK(reasoning_mode(ReasoningParser::deepseek_r1, "<｜Assistant｜>").starts_inside);
  CHECK(reasoning_mode(ReasoningParser::deepseek_r1, "<｜Assistant｜><think>\n").starts_inside);
  CHECK_FALSE(
      reasoning_mode(ReasoningParser::deepseek_r1, "<｜Assistant｜><think>\n\n</think>\n\n").starts_inside);
  CHECK(reasoning_parser_from_name("qwen3") == ReasoningParser::qwen3);
  CHECK(reasoning_parser_from_name("deepseek_r1") == ReasoningParser::deepseek_r1);
  CHECK(reasoning_parser_from_name("none") == ReasoningParser::none);
  CHECK_FALSE(reasoning_parser_from_name("auto"));
  for (auto p : {ReasoningParser::none, ReasoningParser::qwen3, ReasoningParser::deepseek_r1})
    CHECK(reasoning_parser_from_name(reasoning_parser_name(p)) == p);
}
