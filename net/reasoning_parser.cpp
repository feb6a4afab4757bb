#include "net/reasoning_parser.h"

#include <cctype>
#include <cstddef>
#include <utility>

#include "net/tool_calls.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::net {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<ReasoningParser> reasoning_parser_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningParser::qwen3;
  if (name == "deepseek_r1") return ReasoningParser::deepseek_r1;
  if (name == "none") return ReasoningParser::none;
  return std::nullopt;
}

const char* reasoning_parser_name(ReasoningParser p) {
  switch (p) {
    case ReasoningParser::none: return "none";
    case ReasoningParser::qwen3: return "qwen3";
    case ReasoningParser::deepseek_r1: return "deepseek_r1";
  }
  return "none";
}

ReasoningParser detect_reasoning_parser(const Tokenizer& tok) {
  return tok.token_to_id(kOpen) && tok.token_to_id(kClose) ? ReasoningParser::qwen3 : ReasoningParser::none;
}

ReasoningMode reasoning_mode(ReasoningParser parser, std::string_view prompt) {
  if (parser == ReasoningParser::none) return {};
  // Only the end of the prompt matters: earlier turns' think blocks are closed history.
  const std::string_view tail = rtrim(prompt);
  const bool opened = tail.ends_with(kOpen);
  const bool closed = tail.ends_with(kClose);
  if (parser == ReasoningParser::deepseek_r1) return {true, !closed};
  return {true, opened};
}

ReasoningSplit ReasoningSplitter::push(std::string_view delta) {
  buf_.append(delta);
  ReasoningSplit out;
  drain(out, false);
  return out;
}

ReasoningSplit ReasoningSplitter::finish() {
  ReasoningSplit out;
  drain(out, true);
  return out;
}

ReasoningSplit ReasoningSplitter::feed(std::string_view delta, bool last, int tokens) {
  pending_ends_.insert(pending_ends_.end(), size_t(tokens), buf_.size() + delta.size());
  ReasoningSplit out = push(delta);
  if (!last) return out;
  ReasoningSplit tail = finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

void ReasoningSplitter::append(std::string_view delta, int tokens) {
  ReasoningSplit piece = feed(delta, false, tokens);
  whole_.reasoning += piece.reasoning;
  whole_.content += piece.content;
}

ReasoningSplit ReasoningSplitter::take() {
  ReasoningSplit tail = finish();
  whole_.reasoning += tail.reasoning;
  whole_.content += tail.content;
  return std::exchange(whole_, {});
}

void ReasoningSplitter::drain(ReasoningSplit& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::start: {
        // Undecided while the text so far is whitespace and a prefix of "<think>".
        const std::string_view t = ltrim(buf_);
        if (t.starts_with(kOpen)) {
          buf_.erase(0, buf_.size() - t.size() + kOpen.size());
          state_ = State::reasoning;
          pending_ends_.clear();  // whitespace and the marker
          break;
        }
        if (!final && kOpen.starts_with(t)) return;
        state_ = inside_ ? State::reasoning : State::answer;
        break;
      }
      case State::reasoning: {
        const size_t at = buf_.find(kClose);
        if (at != std::string::npos) {
          out.reasoning.append(buf_, 0, at);
          count_reasoning_tokens(at);  // the rest hold part of the marker
          pending_ends_.clear();
          buf_.erase(0, at + kClose.size());
          state_ = State::answer;
          break;
        }
        const size_t keep = final ? 0 : partial_tag_suffix(buf_, kClose);
        out.reasoning.append(buf_, 0, buf_.size() - keep);
        count_reasoning_tokens(buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case State::answer:
        pending_ends_.clear();
        out.content += buf_;
        buf_.clear();
        return;
    }
  }
}

void ReasoningSplitter::count_reasoning_tokens(size_t emitted) {
  size_t i = 0;
  while (i < pending_ends_.size() && pending_ends_[i] <= emitted) ++i;
  reasoning_tokens_ += int(i);
  pending_ends_.erase(pending_ends_.begin(), pending_ends_.begin() + std::ptrdiff_t(i));
  for (size_t& end : pending_ends_) end -= emitted;
}

ReasoningSplit split_reasoning(std::string_view text, bool starts_inside) {
  ReasoningSplitter s(starts_inside);
  return s.feed(text, true);
}

}  // namespace astrai::net
