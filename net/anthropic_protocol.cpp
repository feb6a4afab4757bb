#include "net/anthropic_protocol.h"

#include <vector>

#include "net/sse_format.h"
#include "net/tool_calls.h"
#include "src/core/json_writer.h"
#include "src/structured/response_format.h"

namespace astrai::net {
namespace od = simdjson::ondemand;

namespace {

// Text of a `system` or tool_result `content`: a string or an array of text blocks.
MaybeError read_text_or_blocks(JsonValue& v, const std::string& field, std::string& out) {
  od::json_type t;
  if (v.type().get(t)) return bad_field(field, "is not valid JSON");
  if (t == od::json_type::string) return read_string(v, field, out);
  if (t != od::json_type::array) return bad_field(field, "must be a string or an array of text blocks");
  od::array arr;
  if (v.get_array().get(arr)) return bad_field(field, "is not valid JSON");
  size_t i = 0;
  for (auto el : arr) {
    const std::string at = field + "[" + std::to_string(i++) + "]";
    od::object o;
    if (el.get_object().get(o)) return bad_field(at, "must be an object");
    std::string type, text;
    auto err = for_each_field_at(o, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (k == "type") return read_string(fv, at + ".type", type);
      if (k == "text") return read_string(fv, at + ".text", text);
      return std::nullopt;
    });
    if (err) return err;
    if (type != "text") return bad_field(at + ".type", "must be 'text' here, got '" + type + "'");
    if (!out.empty()) out += '\n';
    out += text;
  }
  return std::nullopt;
}

struct ToolUse {
  std::string id, name, input_json;
};
struct ToolResult {
  std::string tool_use_id, content;
};

MaybeError parse_messages(JsonValue& v, JsonWriter& w) {
  od::array arr;
  if (v.get_array().get(arr)) return bad_field("messages", "must be an array of message objects");
  size_t idx = 0;
  for (auto el : arr) {
    const std::string at = "messages[" + std::to_string(idx++) + "]";
    od::object m;
    if (el.get_object().get(m)) return bad_field(at, "must be an object");
    std::string role, text, thinking;
    bool have_content = false;
    std::vector<ToolUse> uses;
    std::vector<ToolResult> results;
    auto err = for_each_field_at(m, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (k == "role") return read_string(fv, at + ".role", role);
      if (k != "content") return std::nullopt;
      have_content = true;
      od::json_type t;
      if (fv.type().get(t)) return bad_field(at + ".content", "is not valid JSON");
      if (t == od::json_type::string) return read_string(fv, at + ".content", text);
      if (t != od::json_type::array)
        return bad_field(at + ".content", "must be a string or an array of content blocks");
      od::array blocks;
      if (fv.get_array().get(blocks)) return bad_field(at + ".content", "is not valid JSON");
      size_t bi = 0;
      for (auto be : blocks) {
        const std::string bat = at + ".content[" + std::to_string(bi++) + "]";
        od::object b;
        if (be.get_object().get(b)) return bad_field(bat, "must be an object");
        std::string type, btext, id, name, input = "{}", tool_use_id, result, bthinking;
        auto berr = for_each_field_at(b, bat, [&](std::string_view bk, JsonValue& bv) -> MaybeError {
          if (bk == "type") return read_string(bv, bat + ".type", type);
          if (bk == "text") return read_string(bv, bat + ".text", btext);
          if (bk == "id") return read_string(bv, bat + ".id", id);
          if (bk == "name") return read_string(bv, bat + ".name", name);
          if (bk == "input") return read_raw(bv, bat + ".input", input);
          if (bk == "tool_use_id") return read_string(bv, bat + ".tool_use_id", tool_use_id);
          if (bk == "content") return read_text_or_blocks(bv, bat + ".content", result);
          if (bk == "thinking") return read_string(bv, bat + ".thinking", bthinking);
          return std::nullopt;
        });
        if (berr) return berr;
        if (type == "text") {
          if (!text.empty()) text += '\n';
          text += btext;
        } else if (type == "tool_use") {
          if (name.empty()) return bad_field(bat + ".name", "is required");
          uses.push_back({id, name, input});
        } else if (type == "tool_result") {
          if (tool_use_id.empty()) return bad_field(bat + ".tool_use_id", "is required");
          results.push_back({tool_use_id, result});
        } else if (type == "thinking") {
          // An earlier turn's thinking, as clients send it back: the template's reasoning_content.
          thinking += bthinking;
        } else if (type != "redacted_thinking") {
          return bad_field(bat + ".type", "content block type '" + type + "' is not supported");
        }
      }
      return std::nullopt;
    });
    if (err) return err;
    if (role != "user" && role != "assistant")
      return bad_field(at + ".role", "must be 'user' or 'assistant', got '" + role + "'");
    if (!have_content) return bad_field(at + ".content", "is required");
    // Tool results answer the previous assistant turn, so they come before the user's own text.
    for (const auto& r : results)
      w.begin_object()
          .key("role")
          .value("tool")
          .key("content")
          .value(r.content)
          .key("tool_call_id")
          .value(r.tool_use_id)
          .end_object();
    if (!results.empty() && text.empty() && uses.empty()) continue;
    w.begin_object().key("role").value(role).key("content").value(text);
    if (!thinking.empty()) w.key("reasoning_content").value(thinking);
    if (!uses.empty()) {
      w.key("tool_calls").begin_array();
      for (const auto& u : uses) {
        w.begin_object().key("id").value(u.id).key("type").value("function").key("function").begin_object();
        w.key("name").value(u.name).key("arguments").raw(u.input_json).end_object().end_object();
      }
      w.end_array();
    }
    w.end_object();
  }
  if (idx == 0) return bad_field("messages", "must contain at least one message");
  return std::nullopt;
}

// `schemas`: each tool's name and input_schema, in order.
MaybeError parse_tools(JsonValue& v, std::string& out,
                       std::vector<std::pair<std::string, std::string>>& schemas) {
  od::array arr;
  if (v.get_array().get(arr)) return bad_field("tools", "must be an array of tool objects");
  JsonWriter w;
  w.begin_array();
  size_t i = 0;
  for (auto el : arr) {
    const std::string at = "tools[" + std::to_string(i++) + "]";
    od::object o;
    if (el.get_object().get(o)) return bad_field(at, "must be an object");
    std::string name, desc, schema = R"({"type":"object"})";
    auto err = for_each_field_at(o, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (k == "name") return read_string(fv, at + ".name", name);
      if (k == "description") return read_string(fv, at + ".description", desc);
      if (k == "input_schema") return read_raw(fv, at + ".input_schema", schema);
      return std::nullopt;
    });
    if (err) return err;
    if (name.empty()) return bad_field(at + ".name", "is required");
    w.begin_object().key("type").value("function").key("function").begin_object();
    w.key("name").value(name).key("description").value(desc).key("parameters").raw(schema);
    schemas.emplace_back(name, schema);
    w.end_object().end_object();
  }
  w.end_array();
  out = i ? w.take() : std::string();
  return std::nullopt;
}

// tool_choice: {"type": "auto" | "any" | "none"} or {"type": "tool", "name"} (`forced` gets the name).
MaybeError parse_tool_choice(JsonValue& v, bool& none, std::optional<std::string>& forced) {
  const char* what = "must be an object with a 'type' (auto, any, tool, none)";
  od::object o;
  if (v.get_object().get(o)) return bad_field("tool_choice", what);
  std::string type, name;
  auto err = for_each_field_at(o, "tool_choice", [&](std::string_view k, JsonValue& fv) -> MaybeError {
    if (k == "type") return read_string(fv, "tool_choice.type", type);
    if (k == "name" && !is_null(fv)) return read_string(fv, "tool_choice.name", name);
    return std::nullopt;  // disable_parallel_tool_use: one call is what a forced tool gets anyway
  });
  if (err) return err;
  if (type.empty()) return bad_field("tool_choice", what);
  none = type == "none";
  if (type == "tool") {
    if (name.empty()) return bad_field("tool_choice.name", "is required when type is 'tool'");
    forced = std::move(name);
  }
  return std::nullopt;
}

// The `thinking` request field: {"type": "enabled", "budget_tokens": N} | {"type": "disabled"}.
// budget_tokens is accepted and not enforced (max_tokens bounds the whole output).
MaybeError parse_thinking(JsonValue& v, bool& enabled) {
  od::object o;
  if (v.get_object().get(o))
    return bad_field("thinking", "must be an object with a 'type' (enabled, disabled)");
  std::string type;
  auto err = for_each_field_at(o, "thinking", [&](std::string_view k, JsonValue& fv) -> MaybeError {
    if (k == "type") return read_string(fv, "thinking.type", type);
    if (k == "budget_tokens" && !is_null(fv)) {
      int64_t n = 0;
      return read_int(fv, "thinking.budget_tokens", 0, int64_t(1) << 30, n);
    }
    return std::nullopt;
  });
  if (err) return err;
  if (type != "enabled" && type != "disabled" && type != "adaptive")
    return bad_field("thinking.type", "must be 'enabled', 'adaptive' or 'disabled', got '" + type + "'");
  enabled = type != "disabled";
  return std::nullopt;
}

// kwargs (a JSON object's text, or "") with "enable_thinking" added unless it is there already.
std::string with_enable_thinking(const std::string& kwargs, bool on) {
  const std::string kv = std::string("\"enable_thinking\":") + (on ? "true" : "false");
  if (kwargs.empty()) return "{" + kv + "}";
  od::parser p;
  simdjson::padded_string padded(kwargs);
  od::document doc;
  od::object o;
  if (p.iterate(padded).get(doc) || doc.get_object().get(o)) return kwargs;
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return kwargs;
    if (key == "enable_thinking") return kwargs;
  }
  const size_t open = kwargs.find('{');
  const size_t next = kwargs.find_first_not_of(" \t\r\n", open + 1);
  if (open == std::string::npos || next == std::string::npos) return kwargs;
  const bool empty = kwargs[next] == '}';
  return kwargs.substr(0, open + 1) + kv + (empty ? "" : ",") + kwargs.substr(open + 1);
}

}  // namespace

MaybeError parse_messages_request(std::string_view body, MessagesRequest& out, bool require_max_tokens) {
  std::string system;
  bool have_messages = false, have_max_tokens = false;
  std::optional<bool> thinking;
  std::vector<std::pair<std::string, std::string>> tool_schemas;  // name, input_schema
  std::optional<std::string> forced_tool;                         // tool_choice {"type":"tool","name"}
  auto& c = out.common;
  // The Anthropic dialect's documented ranges (temperature 0..1, unlike OpenAI's 0..2); the engine's
  // own ranges are checked by validate_common on the generation route.
  auto err = for_each_body_field(body, "request body", [&](std::string_view key, JsonValue& v) -> MaybeError {
    if (key == "messages") {
      have_messages = true;
      // Messages are written after the system prompt, which may come later in the object.
      JsonWriter body_w;
      body_w.begin_array();
      if (auto e = parse_messages(v, body_w)) return e;
      body_w.end_array();
      out.messages_json = body_w.take();
      return std::nullopt;
    }
    if (is_null(v)) return std::nullopt;
    MaybeError e;
    double d = 0;
    int64_t i = 0;
    if (key == "model") {
      e = read_string(v, "model", c.model);
    } else if (key == "system") {
      e = read_text_or_blocks(v, "system", system);
    } else if (key == "max_tokens") {
      e = read_int(v, "max_tokens", 1, 1 << 30, i);
      c.max_tokens = int(i);
      have_max_tokens = true;
    } else if (key == "stop_sequences") {
      e = read_string_list(v, "stop_sequences", 16, c.stop);
    } else if (key == "temperature") {
      e = read_number(v, "temperature", 0, 1, d);
      c.sampling.temperature = float(d);
    } else if (key == "top_p") {
      e = read_number(v, "top_p", 0, 1, d);
      c.sampling.top_p = float(d);
    } else if (key == "top_k") {
      e = read_int(v, "top_k", 0, 1 << 20, i);
      c.sampling.top_k = int(i);
    } else if (key == "stream") {
      e = read_bool(v, "stream", c.stream);
    } else if (key == "seed") {  // extension (as in the OpenAI API): reproducible sampling
      e = read_int(v, "seed", -(int64_t(1) << 62), int64_t(1) << 62, i);
      c.sampling.seed = uint64_t(i);
    } else if (key == "ignore_eos") {  // extension (vLLM)
      e = read_bool(v, "ignore_eos", c.ignore_eos);
    } else if (key == "tools") {
      e = parse_tools(v, out.tools_json, tool_schemas);
    } else if (key == "logit_bias") {  // extension (as in the OpenAI API)
      bool handled = false;
      e = parse_common_field(key, v, c, handled);
    } else if (key == "chat_template_kwargs") {  // extension (vLLM)
      e = parse_template_kwargs(v, out.template_kwargs_json);
    } else if (key == "thinking") {
      e = parse_thinking(v, thinking.emplace());
    } else if (key == "tool_choice") {
      e = parse_tool_choice(v, out.tool_choice_none, forced_tool);
    }
    return e;
  });
  if (err) return err;
  if (!have_messages) return bad_field("messages", "is required");
  if (require_max_tokens && !have_max_tokens) return bad_field("max_tokens", "is required");
  if (thinking) out.template_kwargs_json = with_enable_thinking(out.template_kwargs_json, *thinking);
  if (forced_tool) {
    // The output is that tool's call: JSON the tool-call parser reads, its input under the schema.
    size_t i = 0;
    while (i < tool_schemas.size() && tool_schemas[i].first != *forced_tool) ++i;
    if (i == tool_schemas.size())
      return bad_field("tool_choice.name", "names no tool in 'tools': '" + *forced_tool + "'");
    if (auto e =
            structured::constrain_to_tool_call(*forced_tool, tool_schemas[i].second,
                                               "tools[" + std::to_string(i) + "].input_schema", c.constraint))
      return field_error(e);
  }
  if (!system.empty()) {
    JsonWriter w;
    w.begin_object().key("role").value("system").key("content").value(system).end_object();
    // Prepend the system message: "[" + system + "," + rest-of-array.
    std::string rest = out.messages_json.substr(1);
    out.messages_json = "[" + w.str() + (rest == "]" ? "" : ",") + rest;
  }
  return std::nullopt;
}

std::string count_tokens_body(int input_tokens) {
  JsonWriter w;
  w.begin_object().key("input_tokens").value(input_tokens).end_object();
  return w.take();
}

namespace {

const char* stop_reason(FinishReason finish, bool tool_use, bool stop_string) {
  if (tool_use) return "tool_use";
  if (stop_string) return "stop_sequence";
  if (finish == FinishReason::length) return "max_tokens";
  return "end_turn";
}

class MessagesFormatter final : public ResponseFormatter {
 public:
  MessagesFormatter(const MessagesRequest& req, std::string model, ReasoningMode reasoning)
      : stream_(req.common.stream),
        tools_(!req.tools_json.empty() && !req.tool_choice_none),
        model_(std::move(model)),
        id_(random_id("msg_")),
        reasoning_(reasoning),
        splitter_(reasoning.starts_inside) {}

  bool streaming() const override { return stream_; }

  std::string begin() override {
    return {};
  }  // message_start needs input_tokens: sent on the first on_deltas

  std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation& g) override {
    std::string out;
    if (stream_ && !started_) start(out, g);
    for (const auto& d : deltas) {
      if (d.choice != 0) continue;
      const bool last = d.finish != FinishReason::none;
      if (last) {
        finish_ = d.finish;
        stop_string_ = d.stop_string;
      }
      if (!stream_) {
        text_ += d.text;
        continue;
      }
      ReasoningSplit split;
      if (reasoning_.enabled)
        split = splitter_.feed(d.text, last);
      else
        split.content = d.text;
      if (!split.reasoning.empty()) {
        if (!thinking_open_) {
          close_block(out);
          open_thinking(out);
        }
        JsonWriter w;
        w.begin_object().key("type").value("content_block_delta").key("index").value(index_);
        w.key("delta")
            .begin_object()
            .key("type")
            .value("thinking_delta")
            .key("thinking")
            .value(split.reasoning);
        w.end_object().end_object();
        append_sse(out, w.str(), "content_block_delta");
      }
      ToolParse parsed;
      if (tools_)
        parsed = parser_.feed(split.content, last);
      else
        parsed.content = std::move(split.content);
      if (!parsed.content.empty()) {
        if (!text_open_) {
          close_block(out);  // a thinking block
          open_text(out);
        }
        JsonWriter w;
        w.begin_object().key("type").value("content_block_delta").key("index").value(index_);
        w.key("delta").begin_object().key("type").value("text_delta").key("text").value(parsed.content);
        w.end_object().end_object();
        append_sse(out, w.str(), "content_block_delta");
      }
      for (const auto& call : parsed.calls) {
        close_block(out);
        ++num_calls_;
        JsonWriter w;
        w.begin_object().key("type").value("content_block_start").key("index").value(index_);
        w.key("content_block")
            .begin_object()
            .key("type")
            .value("tool_use")
            .key("id")
            .value(anthropic_id(call.id));
        w.key("name").value(call.name).key("input").begin_object().end_object().end_object().end_object();
        append_sse(out, w.str(), "content_block_start");
        JsonWriter dw;
        dw.begin_object().key("type").value("content_block_delta").key("index").value(index_);
        dw.key("delta")
            .begin_object()
            .key("type")
            .value("input_json_delta")
            .key("partial_json")
            .value(call.arguments_json);
        dw.end_object().end_object();
        append_sse(out, dw.str(), "content_block_delta");
        block_open_ = true;
        close_block(out);
      }
    }
    return out;
  }

  std::string end(const Generation& g) override {
    if (stream_) {
      std::string out;
      if (!started_) start(out, g);
      if (thinking_open_) close_block(out);
      if (!text_open_ && num_calls_ == 0 && index_ == 0) open_text(out);  // always at least one block
      close_block(out);
      JsonWriter w;
      w.begin_object().key("type").value("message_delta").key("delta").begin_object();
      w.key("stop_reason").value(stop_reason(finish_, num_calls_ > 0, !stop_string_.empty()));
      w.key("stop_sequence");
      if (stop_string_.empty())
        w.null();
      else
        w.value(stop_string_);
      w.end_object()
          .key("usage")
          .begin_object()
          .key("output_tokens")
          .value(g.completion_tokens())
          .end_object();
      w.end_object();
      append_sse(out, w.str(), "message_delta");
      append_sse(out, R"({"type":"message_stop"})", "message_stop");
      return out;
    }
    ReasoningSplit split;
    if (reasoning_.enabled)
      split = split_reasoning(text_, reasoning_.starts_inside);
    else
      split.content = text_;
    ToolParse parsed;
    if (tools_)
      parsed = parse_tool_calls(split.content);
    else
      parsed.content = std::move(split.content);
    JsonWriter w;
    w.begin_object().key("id").value(id_).key("type").value("message").key("role").value("assistant");
    w.key("model").value(model_).key("content").begin_array();
    if (!split.reasoning.empty())
      w.begin_object()
          .key("type")
          .value("thinking")
          .key("thinking")
          .value(split.reasoning)
          .key("signature")
          .value("")
          .end_object();
    std::string_view content = parsed.content;
    if (!parsed.calls.empty())
      while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.remove_suffix(1);
    if (!content.empty() || parsed.calls.empty())
      w.begin_object().key("type").value("text").key("text").value(content).end_object();
    for (const auto& call : parsed.calls) {
      w.begin_object()
          .key("type")
          .value("tool_use")
          .key("id")
          .value(anthropic_id(call.id))
          .key("name")
          .value(call.name);
      w.key("input").raw(valid_object(call.arguments_json)).end_object();
    }
    w.end_array();
    w.key("stop_reason").value(stop_reason(finish_, !parsed.calls.empty(), !stop_string_.empty()));
    w.key("stop_sequence");
    if (stop_string_.empty())
      w.null();
    else
      w.value(stop_string_);
    w.key("usage").begin_object().key("input_tokens").value(g.prompt_tokens());
    w.key("output_tokens").value(g.completion_tokens()).end_object().end_object();
    return w.take();
  }

 private:
  static std::string anthropic_id(const std::string& call_id) { return "toolu_" + call_id.substr(5); }

  // tool_use.input must be an object; arguments that are not one are wrapped as a string.
  static std::string valid_object(const std::string& json) {
    od::parser p;
    simdjson::padded_string padded(json);
    od::document doc;
    od::object o;
    std::string_view raw;
    if (!p.iterate(padded).get(doc) && !doc.get_object().get(o) && !o.raw_json().get(raw)) return json;
    JsonWriter w;
    w.begin_object().key("arguments").value(json).end_object();
    return w.take();
  }

  void start(std::string& out, const Generation& g) {
    started_ = true;
    JsonWriter w;
    w.begin_object().key("type").value("message_start").key("message").begin_object();
    w.key("id")
        .value(id_)
        .key("type")
        .value("message")
        .key("role")
        .value("assistant")
        .key("model")
        .value(model_);
    w.key("content").begin_array().end_array().key("stop_reason").null().key("stop_sequence").null();
    w.key("usage").begin_object().key("input_tokens").value(g.prompt_tokens()).key("output_tokens").value(0);
    w.end_object().end_object().end_object();
    append_sse(out, w.str(), "message_start");
    append_sse(out, R"({"type":"ping"})", "ping");
  }

  void open_text(std::string& out) {
    JsonWriter w;
    w.begin_object().key("type").value("content_block_start").key("index").value(index_);
    w.key("content_block")
        .begin_object()
        .key("type")
        .value("text")
        .key("text")
        .value("")
        .end_object()
        .end_object();
    append_sse(out, w.str(), "content_block_start");
    text_open_ = block_open_ = true;
  }

  // A thinking block as Anthropic streams one (its signature stays empty: nothing to verify here).
  void open_thinking(std::string& out) {
    JsonWriter w;
    w.begin_object().key("type").value("content_block_start").key("index").value(index_);
    w.key("content_block").begin_object().key("type").value("thinking").key("thinking").value("");
    w.key("signature").value("").end_object().end_object();
    append_sse(out, w.str(), "content_block_start");
    thinking_open_ = block_open_ = true;
  }

  void close_block(std::string& out) {
    if (!block_open_) return;
    JsonWriter w;
    w.begin_object().key("type").value("content_block_stop").key("index").value(index_).end_object();
    append_sse(out, w.str(), "content_block_stop");
    block_open_ = text_open_ = thinking_open_ = false;
    ++index_;
  }

  bool stream_, tools_;
  std::string model_, id_;
  std::string text_, stop_string_;
  FinishReason finish_ = FinishReason::none;
  ReasoningMode reasoning_;
  ReasoningSplitter splitter_;
  ToolCallStreamParser parser_;
  bool started_ = false, text_open_ = false, block_open_ = false, thinking_open_ = false;
  int index_ = 0, num_calls_ = 0;
};

}  // namespace

std::unique_ptr<ResponseFormatter> make_messages_formatter(const MessagesRequest& req,
                                                           const std::string& model,
                                                           ReasoningMode reasoning) {
  return std::make_unique<MessagesFormatter>(req, model, reasoning);
}

}  // namespace astrai::net
