#include "net/openai_protocol.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>

#include "net/sse_format.h"
#include "net/tool_calls.h"
#include "src/core/json_writer.h"
#include "src/structured/response_format.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::net {
namespace od = simdjson::ondemand;

std::string random_id(std::string_view prefix) {
  std::string id = new_tool_call_id(prefix);
  return id;
}

namespace {

constexpr int64_t kMaxTokensLimit = 1 << 30;
constexpr size_t kMaxStopTokenIds = 256;

MaybeError parse_logit_bias(JsonValue& v, std::vector<std::pair<int32_t, float>>& out) {
  od::object obj;
  if (v.get_object().get(obj)) return bad_field("logit_bias", "must be an object of token id -> bias");
  return for_each_field_at(obj, "logit_bias", [&](std::string_view key, JsonValue& bv) -> MaybeError {
    char* end = nullptr;
    const std::string k(key);
    const long id = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_field("logit_bias", "keys must be token ids, got '" + k + "'");
    double b = 0;
    if (auto e = read_number(bv, "logit_bias." + k, -100, 100, b)) return e;
    out.emplace_back(int32_t(id), float(b));
    return std::nullopt;
  });
}

// `prompt`: a string, a list of token ids, a list of strings or a list of token-id lists.
MaybeError parse_prompts(JsonValue& v, std::vector<CompletionPrompt>& out) {
  constexpr const char* kShape =
      "must be a string, an array of token ids, or an array of strings or of token-id arrays";
  od::json_type t;
  if (v.type().get(t)) return bad_field("prompt", "is not valid JSON");
  if (t == od::json_type::string) {
    CompletionPrompt p;
    if (auto e = read_string(v, "prompt", p.text)) return e;
    out.push_back(std::move(p));
    return std::nullopt;
  }
  if (t != od::json_type::array) return bad_field("prompt", kShape);
  od::array arr;
  if (v.get_array().get(arr)) return bad_field("prompt", "is not valid JSON");
  // The first element decides the shape; the rest must share it.
  std::optional<od::json_type> shape;
  CompletionPrompt ids;  // a flat list of ids: one prompt
  ids.is_ids = true;
  size_t i = 0;
  for (auto el : arr) {
    JsonValue ev;
    od::json_type et;
    if (el.get(ev) || ev.type().get(et)) return bad_field("prompt", "is not valid JSON");
    const std::string field = "prompt[" + std::to_string(i) + "]";
    if (!shape) shape = et;
    if (et != *shape) return bad_field(field, std::string("does not match prompt[0]: the prompt ") + kShape);
    if (et == od::json_type::number) {
      int64_t id = 0;
      if (auto e = read_int(ev, field, 0, std::numeric_limits<int32_t>::max(), id)) return e;
      ids.ids.push_back(int32_t(id));
      ++i;
      continue;
    }
    if (i == size_t(kMaxCompletionPrompts))
      return bad_field("prompt", "has more than " + std::to_string(kMaxCompletionPrompts) +
                                     " prompts; send them in several requests");
    CompletionPrompt p;
    if (et == od::json_type::string) {
      if (auto e = read_string(ev, field, p.text)) return e;
    } else if (et == od::json_type::array) {
      od::array inner;
      if (ev.get_array().get(inner)) return bad_field(field, "is not valid JSON");
      if (auto e = read_token_ids(inner, field, std::numeric_limits<int32_t>::max(), p.ids)) return e;
      p.is_ids = true;
    } else {
      return bad_field(field, std::string("is not valid here: the prompt ") + kShape);
    }
    out.push_back(std::move(p));
    ++i;
  }
  if (i == 0) return bad_field("prompt", "must not be empty");
  if (shape == od::json_type::number) out.push_back(std::move(ids));
  return std::nullopt;
}

}  // namespace

MaybeError parse_common_field(std::string_view key, JsonValue& v, CommonParams& c, bool& handled) {
  handled = true;
  if (is_null(v)) return std::nullopt;  // null = not given, for every optional field
  double d = 0;
  int64_t i = 0;
  auto& s = c.sampling;
  bool constraint = false;  // one reader for every dialect's structured-output fields
  if (auto e = structured::read_constraint_field(key, v, c.constraint, constraint)) return field_error(e);
  if (constraint) return std::nullopt;
  if (key == "model") return read_string(v, "model", c.model);
  if (key == "temperature") {
    if (auto e = read_number(v, "temperature", 0, 2, d)) return e;
    s.temperature = float(d);
  } else if (key == "top_p") {
    if (auto e = read_number(v, "top_p", 0, 1, d)) return e;
    s.top_p = float(d);
  } else if (key == "top_k") {
    if (auto e = read_int(v, "top_k", -1, 1 << 20, i)) return e;
    s.top_k = i < 0 ? 0 : int(i);
  } else if (key == "min_p") {
    if (auto e = read_number(v, "min_p", 0, 1, d)) return e;
    s.min_p = float(d);
  } else if (key == "frequency_penalty") {
    if (auto e = read_number(v, "frequency_penalty", -2, 2, d)) return e;
    s.frequency_penalty = float(d);
  } else if (key == "presence_penalty") {
    if (auto e = read_number(v, "presence_penalty", -2, 2, d)) return e;
    s.presence_penalty = float(d);
  } else if (key == "repetition_penalty") {
    if (auto e = read_number(v, "repetition_penalty", 1e-6, 10, d)) return e;
    s.repetition_penalty = float(d);
  } else if (key == "seed") {
    if (auto e = read_int(v, "seed", std::numeric_limits<int64_t>::min() / 2,
                          std::numeric_limits<int64_t>::max() / 2, i))
      return e;
    s.seed = uint64_t(i);
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (auto e = read_int(v, std::string(key), 1, kMaxTokensLimit, i)) return e;
    c.max_tokens = int(i);
    c.max_tokens_key = std::string(key);
  } else if (key == "n") {
    if (auto e = read_int(v, "n", 1, 16, i)) return e;
    c.n = int(i);
  } else if (key == "stop") {
    return read_string_list(v, "stop", 16, c.stop);
  } else if (key == "stream") {
    return read_bool(v, "stream", c.stream);
  } else if (key == "ignore_eos") {
    return read_bool(v, "ignore_eos", c.ignore_eos);
  } else if (key == "min_tokens") {
    if (auto e = read_int(v, "min_tokens", 0, kMaxTokensLimit, i)) return e;
    s.min_tokens = int(i);
  } else if (key == "stop_token_ids") {
    od::array arr;
    if (v.get_array().get(arr)) return bad_field("stop_token_ids", "must be an array of token ids");
    c.stop_ids.clear();
    if (auto e = read_token_ids(arr, "stop_token_ids", std::numeric_limits<int32_t>::max(), c.stop_ids))
      return e;
    if (c.stop_ids.size() > kMaxStopTokenIds)
      return bad_field("stop_token_ids", "has more than " + std::to_string(kMaxStopTokenIds) + " ids");
  } else if (key == "include_stop_str_in_output") {
    return read_bool(v, "include_stop_str_in_output", c.include_stop_str_in_output);
  } else if (key == "skip_special_tokens") {
    return read_bool(v, "skip_special_tokens", c.skip_special_tokens);
  } else if (key == "stream_options") {
    od::object o;
    if (v.get_object().get(o)) return bad_field("stream_options", "must be an object");
    return for_each_field_at(o, "stream_options", [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (k == "include_usage" && !is_null(fv))
        return read_bool(fv, "stream_options.include_usage", c.include_usage);
      return std::nullopt;
    });
  } else if (key == "top_logprobs") {
    if (auto e = read_int(v, "top_logprobs", 0, 20, i)) return e;
    s.top_logprobs = int(i);
  } else if (key == "logit_bias") {
    return parse_logit_bias(v, s.logit_bias);
  } else {
    handled = false;
  }
  return std::nullopt;
}

MaybeError validate_common(const CommonParams& c) {
  // max_tokens 0 is "not given": the rest of the context window, always at least 1.
  auto e = validate_sampling(c.sampling, c.max_tokens != 0 ? c.max_tokens : 1, c.n, /*vocab_size=*/0);
  if (!e) {
    if (c.max_tokens > 0 && c.sampling.min_tokens > c.max_tokens)
      return bad_field("min_tokens", "must be at most " + c.max_tokens_key + " (" +
                                         std::to_string(c.max_tokens) + "), got " +
                                         std::to_string(c.sampling.min_tokens));
    return std::nullopt;
  }
  std::string name = request_field_name(e->field);
  if (e->field == RequestField::max_tokens) name = c.max_tokens_key;
  if (e->field == RequestField::top_logprobs) name = c.top_logprobs_key;
  return bad_field(name, e->message);
}

MaybeError parse_chat_messages(JsonValue& v, std::string& messages_json) {
  od::array arr;
  if (v.get_array().get(arr)) return bad_field("messages", "must be an array of message objects");
  JsonWriter w;
  w.begin_array();
  size_t idx = 0;
  for (auto el : arr) {
    const std::string at = "messages[" + std::to_string(idx) + "]";
    od::object m;
    if (el.get_object().get(m)) return bad_field(at, "must be an object");
    std::string role, content, name, tool_calls, tool_call_id, reasoning;
    bool have_content = false;
    auto err = for_each_field_at(m, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (k == "role") {
        if (auto e = read_string(fv, at + ".role", role)) return e;
      } else if (k == "content") {
        if (is_null(fv)) return std::nullopt;
        od::json_type t;
        if (fv.type().get(t)) return bad_field(at + ".content", "is not valid JSON");
        if (t == od::json_type::string) {
          if (auto e = read_string(fv, at + ".content", content)) return e;
        } else if (t == od::json_type::array) {
          // Content parts: text parts are joined with newlines; other modalities are not supported.
          od::array parts;
          if (fv.get_array().get(parts)) return bad_field(at + ".content", "is not valid JSON");
          size_t pi = 0;
          for (auto pe : parts) {
            const std::string pat = at + ".content[" + std::to_string(pi++) + "]";
            od::object po;
            if (pe.get_object().get(po)) return bad_field(pat, "must be an object");
            std::string type, text;
            bool have_text = false;
            auto perr = for_each_field_at(po, pat, [&](std::string_view pk, JsonValue& pv) -> MaybeError {
              if (pk == "type") return read_string(pv, pat + ".type", type);
              if (pk == "text") {
                have_text = true;
                return read_string(pv, pat + ".text", text);
              }
              return std::nullopt;
            });
            if (perr) return perr;
            if (type != "text")
              return bad_field(pat + ".type",
                               "content part type '" + type + "' is not supported (only 'text')");
            if (!have_text) return bad_field(pat + ".text", "is required");
            if (pi > 1) content += '\n';
            content += text;
          }
        } else {
          return bad_field(at + ".content", "must be a string, an array of content parts or null");
        }
        have_content = true;
      } else if (k == "name") {
        if (auto e = read_string(fv, at + ".name", name)) return e;
      } else if (k == "tool_calls") {
        if (is_null(fv)) return std::nullopt;
        od::json_type t;
        if (fv.type().get(t) || t != od::json_type::array)
          return bad_field(at + ".tool_calls", "must be an array");
        if (auto e = read_raw(fv, at + ".tool_calls", tool_calls)) return e;
      } else if (k == "tool_call_id") {
        if (auto e = read_string(fv, at + ".tool_call_id", tool_call_id)) return e;
      } else if (k == "reasoning_content" && !is_null(fv)) {
        // An earlier turn's reasoning, as this server returned it: templates that show it (Qwen3's
        // keeps the last turn's) read message.reasoning_content.
        if (auto e = read_string(fv, at + ".reasoning_content", reasoning)) return e;
      }
      return std::nullopt;
    });
    if (err) return err;
    if (role.empty()) return bad_field(at + ".role", "is required");
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      return bad_field(at + ".role",
                       "must be one of system, developer, user, assistant, tool; got '" + role + "'");
    if (!have_content && !(role == "assistant" && !tool_calls.empty()))
      return bad_field(at + ".content", "is required");
    w.begin_object().key("role").value(role).key("content").value(content);
    if (!name.empty()) w.key("name").value(name);
    if (!tool_calls.empty()) w.key("tool_calls").raw(tool_calls);
    if (!tool_call_id.empty()) w.key("tool_call_id").value(tool_call_id);
    if (!reasoning.empty()) w.key("reasoning_content").value(reasoning);
    w.end_object();
    ++idx;
  }
  if (idx == 0) return bad_field("messages", "must contain at least one message");
  w.end_array();
  messages_json = w.take();
  return std::nullopt;
}

MaybeError parse_template_kwargs(JsonValue& v, std::string& kwargs_json) {
  od::json_type t;
  if (v.type().get(t) || t != od::json_type::object)
    return bad_field("chat_template_kwargs", "must be an object of template variables");
  return read_raw(v, "chat_template_kwargs", kwargs_json);
}

namespace {

MaybeError parse_tools(JsonValue& v, std::string& tools_json) {
  od::json_type t;
  if (v.type().get(t) || t != od::json_type::array)
    return bad_field("tools", "must be an array of tool objects");
  if (auto e = read_raw(v, "tools", tools_json)) return e;
  // Validate the shape on a second, independent pass over the raw text.
  od::parser p;
  simdjson::padded_string padded(tools_json);
  od::document doc;
  od::array arr;
  if (p.iterate(padded).get(doc) || doc.get_array().get(arr)) return bad_field("tools", "is not valid JSON");
  size_t i = 0;
  for (auto el : arr) {
    const std::string at = "tools[" + std::to_string(i++) + "]";
    od::object o;
    if (el.get_object().get(o)) return bad_field(at, "must be an object");
    std::string_view type;
    if (o["type"].get_string().get(type) || type != "function")
      return bad_field(at + ".type", "must be 'function'");
    std::string_view name;
    if (o["function"]["name"].get_string().get(name) || name.empty())
      return bad_field(at + ".function.name", "is required");
  }
  if (i == 0) tools_json.clear();
  return std::nullopt;
}

MaybeError parse_tool_choice(JsonValue& v, std::string& out) {
  od::json_type t;
  if (v.type().get(t)) return bad_field("tool_choice", "is not valid JSON");
  if (t == od::json_type::string) {
    if (auto e = read_string(v, "tool_choice", out)) return e;
    if (out != "none" && out != "auto" && out != "required")
      return bad_field("tool_choice", "must be 'none', 'auto', 'required' or a function object");
    return std::nullopt;
  }
  od::object o;
  std::string_view name;
  if (v.get_object().get(o) || o["function"]["name"].get_string().get(name))
    return bad_field(
        "tool_choice",
        "must be 'none', 'auto', 'required' or {\"type\":\"function\",\"function\":{\"name\":...}}");
  out = std::string(name);
  return std::nullopt;
}

}  // namespace

MaybeError parse_chat_request(std::string_view body, ChatRequest& out) {
  bool have_messages = false;
  auto err = for_each_body_field(body, "request body", [&](std::string_view key, JsonValue& v) -> MaybeError {
    bool handled = false;
    if (auto e = parse_common_field(key, v, out.common, handled)) return e;
    if (handled) return std::nullopt;
    if (key == "messages") {
      have_messages = true;
      return parse_chat_messages(v, out.messages_json);
    }
    if (is_null(v)) return std::nullopt;
    if (key == "logprobs") return read_bool(v, "logprobs", out.common.sampling.logprobs);
    if (key == "tools") return parse_tools(v, out.tools_json);
    if (key == "tool_choice") return parse_tool_choice(v, out.tool_choice);
    if (key == "add_generation_prompt")
      return read_bool(v, "add_generation_prompt", out.add_generation_prompt);
    if (key == "chat_template_kwargs") return parse_template_kwargs(v, out.template_kwargs_json);
    return std::nullopt;  // unknown fields are ignored, as OpenAI-compatible servers do
  });
  if (err) return err;
  if (!have_messages) return bad_field("messages", "is required");
  if (out.common.sampling.top_logprobs > 0 && !out.common.sampling.logprobs)
    return bad_field("top_logprobs", "requires logprobs to be true");
  return std::nullopt;
}

MaybeError parse_completion_request(std::string_view body, CompletionRequest& out) {
  bool have_prompt = false;
  auto err = for_each_body_field(body, "request body", [&](std::string_view key, JsonValue& v) -> MaybeError {
    if (key == "max_tokens" && !is_null(v)) {  // 0 as well: the prompt alone (checked below)
      int64_t n = 0;
      if (auto e = read_int(v, "max_tokens", 0, kMaxTokensLimit, n)) return e;
      out.prompt_only = n == 0;
      out.common.max_tokens = n == 0 ? 1 : int(n);
      out.common.max_tokens_key = "max_tokens";
      return std::nullopt;
    }
    bool handled = false;
    if (auto e = parse_common_field(key, v, out.common, handled)) return e;
    if (handled) return std::nullopt;
    if (key == "prompt") {
      have_prompt = true;
      return parse_prompts(v, out.prompts);
    }
    if (is_null(v)) return std::nullopt;
    if (key == "echo") return read_bool(v, "echo", out.echo);
    if (key == "logprobs") {
      int64_t k = 0;
      if (auto e = read_int(v, "logprobs", 0, 20, k)) return e;
      out.logprobs = int(k);
      out.common.sampling.logprobs = true;
      out.common.sampling.top_logprobs = int(k);
      out.common.top_logprobs_key = "logprobs";
      return std::nullopt;
    }
    return std::nullopt;
  });
  if (err) return err;
  if (!have_prompt) return bad_field("prompt", "is required");
  if (out.prompt_only && !out.echo)
    return bad_field("max_tokens", "must be at least 1 (0 only with echo: the prompt alone)");
  return std::nullopt;
}

std::string models_body(const std::string& model, int64_t max_model_len) {
  JsonWriter w;
  w.begin_object().key("object").value("list").key("data").begin_array();
  w.begin_object().key("id").value(model).key("object").value("model");
  w.key("created").value(int64_t(std::time(nullptr))).key("owned_by").value("astrai");
  w.key("max_model_len").value(max_model_len).end_object();
  w.end_array().end_object();
  return w.take();
}

// ---------------------------------------------------------------------------------------------
// Response formatting

namespace {

// `reasoning_tokens`: with a reasoning parser on, how many of the completion tokens were reasoning.
void write_usage(JsonWriter& w, const Generation& g, std::optional<int> reasoning_tokens = std::nullopt) {
  w.begin_object().key("prompt_tokens").value(g.prompt_tokens());
  w.key("completion_tokens").value(g.completion_tokens());
  w.key("total_tokens").value(g.prompt_tokens() + g.completion_tokens());
  if (reasoning_tokens)
    w.key("completion_tokens_details")
        .begin_object()
        .key("reasoning_tokens")
        .value(*reasoning_tokens)
        .end_object();
  w.end_object();
}

void write_bytes(JsonWriter& w, const std::string& s) {
  w.begin_array();
  for (unsigned char ch : s) w.value(int(ch));
  w.end_array();
}

// One chat logprobs "content" entry.
void write_chat_logprob(JsonWriter& w, const TokenInfo& t, const Tokenizer& tok) {
  const std::string piece = tok.decode({t.id}, false);
  w.begin_object().key("token").value(piece).key("logprob").value(t.logprob).key("bytes");
  write_bytes(w, piece);
  w.key("top_logprobs").begin_array();
  for (const auto& alt : t.top) {
    const std::string ap = tok.decode({alt.token}, false);
    w.begin_object().key("token").value(ap).key("logprob").value(alt.logprob).key("bytes");
    write_bytes(w, ap);
    w.end_object();
  }
  w.end_array().end_object();
}

const char* openai_finish(FinishReason f, bool tool_calls) {
  if (tool_calls && (f == FinishReason::stop || f == FinishReason::none)) return "tool_calls";
  if (f == FinishReason::length) return "length";
  if (f == FinishReason::error) return "error";
  return "stop";  // stop, cancelled
}

void write_tool_call(JsonWriter& w, const ToolCall& c, int index, bool with_index) {
  w.begin_object();
  if (with_index) w.key("index").value(index);
  w.key("id").value(c.id).key("type").value("function").key("function").begin_object();
  w.key("name").value(c.name).key("arguments").value(c.arguments_json).end_object();
  w.end_object();
}

class ChatFormatter final : public ResponseFormatter {
 public:
  ChatFormatter(const ChatRequest& req, std::string model, const Tokenizer& tok, ReasoningMode reasoning)
      : stream_(req.common.stream),
        include_usage_(req.common.include_usage),
        logprobs_(req.common.sampling.logprobs),
        tools_(!req.tools_json.empty() && req.tool_choice != "none"),
        model_(std::move(model)),
        tok_(tok),
        id_(random_id("chatcmpl-")),
        created_(int64_t(std::time(nullptr))),
        reasoning_(reasoning),
        choices_(size_t(req.common.n), ChatChoice(reasoning)) {}

  bool streaming() const override { return stream_; }

  std::string begin() override {
    if (!stream_) return {};
    std::string out;
    for (size_t c = 0; c < choices_.size(); ++c)
      append_sse(out, chunk(int(c), [](JsonWriter& w) {
                   w.key("role").value("assistant").key("content").value("");
                 }));
    return out;
  }

  std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation&) override {
    std::string out;
    for (const auto& d : deltas) {
      auto& ch = choices_[size_t(d.choice)];
      if (!stream_) {
        if (reasoning_.enabled)
          ch.reasoning.append(d.text, int(d.tokens.size()));
        else
          ch.text += d.text;
        if (logprobs_)
          for (const auto& t : d.tokens) {
            JsonWriter lw;
            write_chat_logprob(lw, t, tok_);
            ch.logprobs.push_back(lw.take());
          }
        if (d.finish != FinishReason::none) ch.finish = d.finish;
        continue;
      }
      const bool last = d.finish != FinishReason::none;
      ReasoningSplit split;
      if (reasoning_.enabled)
        split = ch.reasoning.feed(d.text, last, int(d.tokens.size()));
      else
        split.content = d.text;
      ToolParse parsed;
      if (tools_)
        parsed = ch.parser.feed(split.content, last);
      else
        parsed.content = std::move(split.content);
      if (!parsed.content.empty() || !split.reasoning.empty() || (logprobs_ && !d.tokens.empty())) {
        std::string lp;
        if (logprobs_ && !d.tokens.empty()) {
          JsonWriter lw;
          lw.begin_object().key("content").begin_array();
          for (const auto& t : d.tokens) write_chat_logprob(lw, t, tok_);
          lw.end_array().end_object();
          lp = lw.take();
        }
        append_sse(out, chunk(
                            d.choice,
                            [&](JsonWriter& w) {
                              if (!split.reasoning.empty()) w.key("reasoning_content").value(split.reasoning);
                              if (!parsed.content.empty() || split.reasoning.empty())
                                w.key("content").value(parsed.content);
                            },
                            nullptr, lp));
      }
      for (const auto& call : parsed.calls) {
        const int index = ch.num_calls++;
        append_sse(out, chunk(d.choice, [&](JsonWriter& w) {
                     w.key("tool_calls").begin_array();
                     write_tool_call(w, call, index, true);
                     w.end_array();
                   }));
      }
      if (last)
        append_sse(out, chunk(
                            d.choice, [](JsonWriter&) {}, openai_finish(d.finish, ch.num_calls > 0)));
    }
    return out;
  }

  std::string end(const Generation& g) override {
    if (stream_) {
      std::string out;
      if (include_usage_) {
        JsonWriter w;
        head(w);
        w.key("choices").begin_array().end_array().key("usage");
        write_usage(w, g, reasoning_tokens());
        w.end_object();
        append_sse(out, w.str());
      }
      append_sse(out, "[DONE]");
      return out;
    }
    JsonWriter w;
    w.begin_object().key("id").value(id_).key("object").value("chat.completion");
    w.key("created").value(created_).key("model").value(model_).key("choices").begin_array();
    for (size_t c = 0; c < choices_.size(); ++c) {
      auto& ch = choices_[c];
      ReasoningSplit split;
      if (reasoning_.enabled)
        split = ch.reasoning.take();
      else
        split.content = std::move(ch.text);
      ToolParse parsed;
      if (tools_)
        parsed = parse_tool_calls(split.content);
      else
        parsed.content = std::move(split.content);
      const bool calls = !parsed.calls.empty();
      w.begin_object().key("index").value(int(c)).key("message").begin_object();
      w.key("role").value("assistant");
      // Only with reasoning: an output without any is answered as without a parser.
      if (!split.reasoning.empty()) w.key("reasoning_content").value(split.reasoning);
      w.key("content");
      if (calls) {
        std::string_view content = parsed.content;
        while (!content.empty() && (content.back() == '\n' || content.back() == ' '))
          content.remove_suffix(1);
        while (!content.empty() && (content.front() == '\n' || content.front() == ' '))
          content.remove_prefix(1);
        if (content.empty())
          w.null();
        else
          w.value(content);
        w.key("tool_calls").begin_array();
        int i = 0;
        for (const auto& call : parsed.calls) write_tool_call(w, call, i++, false);
        w.end_array();
      } else {
        w.value(parsed.content);
      }
      w.end_object().key("logprobs");
      if (logprobs_) {
        w.begin_object().key("content").begin_array();
        for (const auto& e : ch.logprobs) w.raw(e);
        w.end_array().end_object();
      } else {
        w.null();
      }
      w.key("finish_reason").value(openai_finish(ch.finish, calls)).end_object();
    }
    w.end_array().key("usage");
    write_usage(w, g, reasoning_tokens());
    w.end_object();
    return w.take();
  }

 private:
  // What a chat response has gathered for one choice.
  struct ChatChoice {
    explicit ChatChoice(ReasoningMode m) : reasoning(m.starts_inside) {}
    std::string text;                   // non-streaming without a reasoning parser: the output
    std::vector<std::string> logprobs;  // serialised "content" entries
    FinishReason finish = FinishReason::none;
    ReasoningSplitter reasoning;
    ToolCallStreamParser parser;
    int num_calls = 0;
  };

  // All choices' reasoning tokens; none (no usage field) without a reasoning parser.
  std::optional<int> reasoning_tokens() const {
    if (!reasoning_.enabled) return std::nullopt;
    int n = 0;
    for (const auto& ch : choices_) n += ch.reasoning.reasoning_tokens();
    return n;
  }

  void head(JsonWriter& w) const {
    w.begin_object().key("id").value(id_).key("object").value("chat.completion.chunk");
    w.key("created").value(created_).key("model").value(model_);
  }

  template <typename DeltaFn>
  std::string chunk(int index, DeltaFn&& delta, const char* finish = nullptr,
                    const std::string& logprobs = {}) const {
    JsonWriter w;
    head(w);
    w.key("choices").begin_array().begin_object().key("index").value(index).key("delta").begin_object();
    delta(w);
    w.end_object().key("logprobs");
    if (logprobs.empty())
      w.null();
    else
      w.raw(logprobs);
    w.key("finish_reason");
    if (finish)
      w.value(finish);
    else
      w.null();
    w.end_object().end_array().end_object();
    return w.take();
  }

  bool stream_, include_usage_, logprobs_, tools_;
  std::string model_;
  const Tokenizer& tok_;
  std::string id_;
  int64_t created_;
  ReasoningMode reasoning_;
  std::vector<ChatChoice> choices_;
};

}  // namespace

std::unique_ptr<ResponseFormatter> make_chat_formatter(const ChatRequest& req, const std::string& model,
                                                       const Tokenizer& tok, ReasoningMode reasoning) {
  return std::make_unique<ChatFormatter>(req, model, tok, reasoning);
}

}  // namespace astrai::net

namespace astrai::net {
namespace {

class CompletionFormatter final : public ResponseFormatter {
 public:
  CompletionFormatter(const CompletionRequest& req, std::string model, const Tokenizer& tok,
                      std::vector<std::string> prompt_texts, std::vector<std::vector<int32_t>> prompt_ids)
      : stream_(req.common.stream),
        include_usage_(req.common.include_usage),
        logprobs_(req.logprobs >= 0),
        echo_(req.echo),
        prompt_only_(req.prompt_only),
        model_(std::move(model)),
        tok_(tok),
        prompts_(std::move(prompt_texts)),
        per_prompt_(std::max(1, req.common.n)),
        id_(random_id("cmpl-")),
        created_(int64_t(std::time(nullptr))),
        choices_(prompts_.size() * size_t(per_prompt_)),
        prompt_ids_(std::move(prompt_ids)),
        prompt_sent_(prompts_.size(), false) {}

  bool streaming() const override { return stream_; }

  std::string begin() override {
    // With logprobs the echoed prompt carries its tokens' logprobs: sent with the first deltas.
    if (!stream_ || !echo_ || logprobs_) return {};
    std::string out;
    for (size_t c = 0; c < choices_.size(); ++c)
      append_sse(out, chunk(int(c), prompt_of(c), nullptr, nullptr, choices_[c].offset));
    return out;
  }

  std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation& g) override {
    std::string out;
    for (const auto& d : deltas) {
      auto& ch = choices_[size_t(d.choice)];
      const size_t p = size_t(d.choice / per_prompt_);
      if (stream_ && echo_ && logprobs_ && !prompt_sent_[p]) {
        prompt_sent_[p] = true;  // every logprob of prompt p arrived before its first delta
        const std::vector<TokenInfo> prompt = prompt_entries(g, p);
        for (size_t c = p * size_t(per_prompt_); c < (p + 1) * size_t(per_prompt_); ++c)
          append_sse(out,
                     chunk(int(c), prompts_[p], nullptr, &prompt, choices_[c].offset, /*prompt_first=*/true));
      }
      if (prompt_only_) {  // the engine's one token is not part of the answer
        if (d.finish == FinishReason::none) continue;
        ch.finish = FinishReason::length;
        if (stream_) append_sse(out, chunk(d.choice, "", "length", nullptr, ch.offset));
        continue;
      }
      if (!stream_) {
        ch.text += d.text;
        if (logprobs_) ch.tokens.insert(ch.tokens.end(), d.tokens.begin(), d.tokens.end());
        if (d.finish != FinishReason::none) ch.finish = d.finish;
        continue;
      }
      const bool last = d.finish != FinishReason::none;
      if (!d.text.empty() || (logprobs_ && !d.tokens.empty()) || last)
        append_sse(out, chunk(d.choice, d.text, last ? finish_name(d.finish) : nullptr,
                              logprobs_ ? &d.tokens : nullptr, ch.offset));
    }
    return out;
  }

  std::string end(const Generation& g) override {
    if (stream_) {
      std::string out;
      if (include_usage_) {
        JsonWriter w;
        head(w, "text_completion");
        w.key("choices").begin_array().end_array().key("usage");
        usage(w, g);
        w.end_object();
        append_sse(out, w.str());
      }
      append_sse(out, "[DONE]");
      return out;
    }
    JsonWriter w;
    head(w, "text_completion");
    w.key("choices").begin_array();
    for (size_t c = 0; c < choices_.size(); ++c) {
      auto& ch = choices_[c];
      w.begin_object().key("index").value(int(c)).key("text").value(echo_ ? prompt_of(c) + ch.text : ch.text);
      w.key("logprobs");
      if (logprobs_ && echo_) {
        // The prompt's tokens first (the first has no logprob), then the generated ones.
        std::vector<TokenInfo> all = prompt_entries(g, c / size_t(per_prompt_));
        all.insert(all.end(), ch.tokens.begin(), ch.tokens.end());
        size_t offset = 0;
        write_logprobs(w, all, offset, /*prompt_first=*/true);
      } else if (logprobs_) {
        size_t offset = 0;
        write_logprobs(w, ch.tokens, offset);
      } else {
        w.null();
      }
      w.key("finish_reason").value(finish_name(ch.finish)).end_object();
    }
    w.end_array().key("usage");
    usage(w, g);
    w.end_object();
    return w.take();
  }

 private:
  // The usage object; the prompt alone (prompt_only_) generated nothing the response shows.
  void usage(JsonWriter& w, const Generation& g) const {
    if (!prompt_only_) return write_usage(w, g);
    w.begin_object().key("prompt_tokens").value(g.prompt_tokens()).key("completion_tokens").value(0);
    w.key("total_tokens").value(g.prompt_tokens()).end_object();
  }

  // What a completion response has gathered for one choice.
  struct CompletionChoice {
    std::string text;
    FinishReason finish = FinishReason::none;
    std::vector<TokenInfo> tokens;
    size_t offset = 0;  // streaming: where the next chunk's text_offset starts
  };
  static const char* finish_name(FinishReason f) { return f == FinishReason::length ? "length" : "stop"; }

  void head(JsonWriter& w, const char* object) const {
    w.begin_object().key("id").value(id_).key("object").value(object);
    w.key("created").value(created_).key("model").value(model_);
  }

  const std::string& prompt_of(size_t choice) const { return prompts_[choice / size_t(per_prompt_)]; }

  // Prompt p's echoed entries: its first token (no logprob), then each later one's
  // (Generation::prompt_logprobs).
  std::vector<TokenInfo> prompt_entries(const Generation& g, size_t p) const {
    std::vector<TokenInfo> e;
    if (p < prompt_ids_.size() && !prompt_ids_[p].empty()) e.push_back(TokenInfo{prompt_ids_[p][0], 0, {}});
    e.insert(e.end(), g.prompt_logprobs(int(p)).begin(), g.prompt_logprobs(int(p)).end());
    return e;
  }

  // Completions-style logprobs: parallel arrays. prompt_first: toks start with the echoed prompt,
  // whose first token has null for its logprob and alternatives (as the legacy API writes it).
  // text_offset counts the tokens' text from `offset` (the choice's text so far, the echoed prompt
  // included), which it advances past them.
  void write_logprobs(JsonWriter& w, const std::vector<TokenInfo>& toks, size_t& offset,
                      bool prompt_first = false) const {
    std::vector<std::string> pieces;
    for (const auto& t : toks) pieces.push_back(tok_.decode({t.id}, false));
    w.begin_object().key("tokens").begin_array();
    for (const auto& p : pieces) w.value(p);
    w.end_array().key("token_logprobs").begin_array();
    for (size_t i = 0; i < toks.size(); ++i) {
      if (prompt_first && i == 0)
        w.null();
      else
        w.value(toks[i].logprob);
    }
    w.end_array().key("top_logprobs").begin_array();
    for (size_t i = 0; i < toks.size(); ++i) {
      if (prompt_first && i == 0) {
        w.null();
        continue;
      }
      w.begin_object();
      for (const auto& a : toks[i].top) w.key(tok_.decode({a.token}, false)).value(a.logprob);
      w.end_object();
    }
    w.end_array().key("text_offset").begin_array();
    for (const auto& p : pieces) {
      w.value(uint64_t(offset));
      offset += p.size();
    }
    w.end_array().end_object();
  }

  std::string chunk(int index, const std::string& text, const char* finish,
                    const std::vector<TokenInfo>* toks, size_t& offset, bool prompt_first = false) const {
    JsonWriter w;
    head(w, "text_completion");
    w.key("choices").begin_array().begin_object().key("index").value(index).key("text").value(text);
    w.key("logprobs");
    if (toks)
      write_logprobs(w, *toks, offset, prompt_first);
    else
      w.null();
    w.key("finish_reason");
    if (finish)
      w.value(finish);
    else
      w.null();
    w.end_object().end_array().end_object();
    return w.take();
  }

  bool stream_, include_usage_, logprobs_, echo_, prompt_only_;
  std::string model_;
  const Tokenizer& tok_;
  std::vector<std::string> prompts_;  // each prompt's text (echo)
  int per_prompt_;                    // choices per prompt (n)
  std::string id_;
  int64_t created_;
  std::vector<CompletionChoice> choices_;
  std::vector<std::vector<int32_t>> prompt_ids_;  // echo with logprobs: each prompt's tokens
  std::vector<bool> prompt_sent_;                 // streaming: prompt p's echoed chunks went out
};

}  // namespace

std::unique_ptr<ResponseFormatter> make_completion_formatter(const CompletionRequest& req,
                                                             const std::string& model, const Tokenizer& tok,
                                                             std::vector<std::string> prompt_texts,
                                                             std::vector<std::vector<int32_t>> prompt_ids) {
  return std::make_unique<CompletionFormatter>(req, model, tok, std::move(prompt_texts),
                                               std::move(prompt_ids));
}

}  // namespace astrai::net
