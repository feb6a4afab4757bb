// OpenAI Chat Completions and Completions: request parsing (simdjson on-demand, validated field by
// field) and response / stream-chunk formatting.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/json_fields.h"
#include "net/reasoning_parser.h"
#include "net/response_formatter.h"
#include "src/engine/engine.h"

namespace astrai {
class Tokenizer;
}

namespace astrai::net {

// Fields shared by every generation route.
struct CommonParams {
  std::string model;
  SamplingParams sampling;
  int max_tokens = 0;  // 0: not given
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;  // vLLM extension: keep generating past the end-of-sequence token
  // vLLM's sampling extensions: more stop ids, the stop string kept in the text, special tokens'
  // text kept (sampling.min_tokens is the fourth).
  std::vector<int32_t> stop_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  // Structured output: response_format, vLLM's structured_outputs / guided_*, llama.cpp's json_schema.
  ConstraintSpec constraint;
  // The dialect's names for canonical fields that have more than one: errors use what the client sent.
  std::string max_tokens_key = "max_tokens";      // or max_completion_tokens
  std::string top_logprobs_key = "top_logprobs";  // completions: logprobs
};

struct ChatRequest {
  CommonParams common;
  std::string messages_json;         // normalised for the chat template: content parts joined to strings
  std::string tools_json;            // "" when no tools
  std::string tool_choice = "auto";  // none | auto | required | <function name>
  bool add_generation_prompt = true;
  std::string template_kwargs_json;  // chat_template_kwargs: extra template variables; "" when none
};

// One prompt of a completions request: text, or token ids.
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

// Prompts one completions request may carry (a list of them: lm-evaluation-harness batches).
constexpr int kMaxCompletionPrompts = 256;

struct CompletionRequest {
  CommonParams common;
  // `prompt`: a string, a list of token ids, or a list of either (one choice set per prompt, in
  // order: choice p * n + j is prompt p's j-th).
  std::vector<CompletionPrompt> prompts;
  bool echo = false;
  int logprobs = -1;  // completions API: number of top logprobs, -1 = off
  // max_tokens 0 with echo (as vLLM takes it): the prompt alone, with its logprobs when asked; the
  // engine draws one token (common.max_tokens 1) that the response leaves out.
  bool prompt_only = false;
};

MaybeError parse_chat_request(std::string_view body, ChatRequest& out);
MaybeError parse_completion_request(std::string_view body, CompletionRequest& out);
// One field common to chat / completions / WebSocket generate frames. Sets handled when the key
// is one of them.
MaybeError parse_common_field(std::string_view key, JsonValue& v, CommonParams& c, bool& handled);
// After a dialect has read its fields with its own documented ranges: checks the request against the
// engine's ranges (validate_sampling), naming a failing field as the client named it. Generation
// routes only (apply-template and count_tokens read the same fields but run nothing).
MaybeError validate_common(const CommonParams& c);
// Parses the `messages` array into the chat template's message list.
MaybeError parse_chat_messages(JsonValue& v, std::string& messages_json);
// `chat_template_kwargs` (vLLM's name): a JSON object whose keys become chat template variables
// (Qwen3's {"enable_thinking": false}).
MaybeError parse_template_kwargs(JsonValue& v, std::string& kwargs_json);

// `reasoning` splits think-block text off the answer (reasoning_content); default: off.
std::unique_ptr<ResponseFormatter> make_chat_formatter(const ChatRequest& req, const std::string& model,
                                                       const Tokenizer& tok, ReasoningMode reasoning = {});
// prompt_texts: each prompt's text (echo). With echo and logprobs, prompt_ids are each prompt's
// tokens, whose logprobs (Generation::prompt_logprobs, from GenerationSpec::prompt_logprobs) the
// choices' logprobs start with; empty otherwise.
std::unique_ptr<ResponseFormatter> make_completion_formatter(
    const CompletionRequest& req, const std::string& model, const Tokenizer& tok,
    std::vector<std::string> prompt_texts, std::vector<std::vector<int32_t>> prompt_ids = {});

// {"object":"list","data":[{"id","object":"model","created","owned_by","max_model_len"}]}
std::string models_body(const std::string& model, int64_t max_model_len);

std::string random_id(std::string_view prefix);

}  // namespace astrai::net
