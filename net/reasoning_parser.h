// Reasoning output: the text a model writes between its think markers (<think> ... </think> for
// Qwen3 and DeepSeek-R1) is split off the answer, so that it reaches clients as OpenAI
// `reasoning_content`, Anthropic `thinking` blocks or Responses `reasoning` items and never as
// content; tool-call parsing then sees only the answer.
//
// Parsers, named as vLLM's --reasoning-parser names them:
//   qwen3        the output may open a think block at its start; a prompt that already ends inside
//                one (a template that writes "<think>\n" after the assistant header) starts there.
//   deepseek_r1  the output is reasoning until "</think>" unless the prompt has closed the block
//                (DeepSeek-R1's templates open it in the prompt; older ones let the model write it).
//   none         no splitting: the output is all content.
// The default (auto) is qwen3 when the tokenizer has <think> and </think> as added tokens, else none.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astrai {
class Tokenizer;
}

namespace astrai::net {

enum class ReasoningParser : uint8_t { none, qwen3, deepseek_r1 };

// "qwen3", "deepseek_r1", "none"; nullopt for any other name.
std::optional<ReasoningParser> reasoning_parser_from_name(std::string_view name);
const char* reasoning_parser_name(ReasoningParser p);
// auto: qwen3 when both markers are added tokens of `tok`, else none.
ReasoningParser detect_reasoning_parser(const Tokenizer& tok);

// How one request's output is split: not at all, or starting in the answer or inside reasoning.
struct ReasoningMode {
  bool enabled = false;
  bool starts_inside = false;  // the rendered prompt left a think block open
};
ReasoningMode reasoning_mode(ReasoningParser parser, std::string_view prompt);

struct ReasoningSplit {
  std::string reasoning;  // think-block text, markers removed
  std::string content;    // the answer
};

// Streaming splitter for one choice: text deltas in, reasoning and answer deltas out, every piece
// emitted as soon as it cannot be part of a marker (only a possible marker prefix is held back).
// Within one result the reasoning comes before the content: the output has one think block, at its
// start (leading whitespace before "<think>" is dropped with the marker); once "</think>" is seen
// the rest is answer, markers and all.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_inside = false) : inside_(starts_inside) {}
  ReasoningSplit push(std::string_view delta);
  ReasoningSplit finish();
  // push(delta), then finish() when `last`: what a formatter calls for each delta of a choice.
  // `tokens`: how many generated tokens the delta's text came from, for reasoning_tokens().
  ReasoningSplit feed(std::string_view delta, bool last, int tokens = 0);
  // The tokens fed so far whose text is all reasoning (usage.completion_tokens_details.
  // reasoning_tokens): a token holding any part of a marker, or whitespace before an opening one,
  // does not count; one whose text is held back counts once it turns out to be reasoning.
  int reasoning_tokens() const { return reasoning_tokens_; }

  // Non-streaming: each delta split as it comes (so that its tokens are counted as streaming counts
  // them), the pieces kept; take() finishes and returns the whole output's split.
  void append(std::string_view delta, int tokens);
  ReasoningSplit take();

 private:
  enum class State { start, reasoning, answer };
  void drain(ReasoningSplit& out, bool final);
  // The first `emitted` bytes of buf_ went out as reasoning: the pending tokens within them count.
  void count_reasoning_tokens(size_t emitted);
  State state_ = State::start;
  bool inside_;  // in `start`: whether text that opens no block is reasoning (else answer)
  std::string buf_;
  // Fed tokens whose text is not all emitted yet: where each one's text ends in buf_.
  std::vector<size_t> pending_ends_;
  int reasoning_tokens_ = 0;
  ReasoningSplit whole_;  // append(): the output so far
};

// The whole output at once (non-streaming responses).
ReasoningSplit split_reasoning(std::string_view text, bool starts_inside);

}  // namespace astrai::net
