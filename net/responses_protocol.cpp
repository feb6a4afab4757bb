#include "net/responses_protocol.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>
#include <vector>

#include "net/sse_format.h"
#include "net/tool_calls.h"
#include "src/core/json_writer.h"
#include "src/structured/response_format.h"

namespace astrai::net {
namespace od = simdjson::ondemand;

namespace {

// One chat-template message built from input items.
struct TemplateMessage {
  std::string role, content, tool_call_id;
  std::string reasoning;  // an assistant turn's reasoning (reasoning_content for the template)
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;
};

// Message content: a string, or an array of text parts (input_text, output_text; also "text").
MaybeError read_content(JsonValue& v, const std::string& at, std::string& out) {
  od::json_type t;
  if (v.type().get(t)) return bad_field(at, "is not valid JSON");
  if (t == od::json_type::string) return read_string(v, at, out);
  if (t != od::json_type::array) return bad_field(at, "must be a string or an array of content parts");
  od::array parts;
  if (v.get_array().get(parts)) return bad_field(at, "is not valid JSON");
  size_t i = 0;
  for (auto pe : parts) {
    const std::string pat = at + "[" + std::to_string(i++) + "]";
    od::object po;
    if (pe.get_object().get(po)) return bad_field(pat, "must be an object");
    std::string type, text;
    auto err = for_each_field_at(po, pat, [&](std::string_view k, JsonValue& pv) -> MaybeError {
      if (k == "type") return read_string(pv, pat + ".type", type);
      if (k == "text") return read_string(pv, pat + ".text", text);
      return std::nullopt;
    });
    if (err) return err;
    if (type != "input_text" && type != "output_text" && type != "text" && type != "reasoning_text")
      return bad_field(pat + ".type",
                       "content part type '" + type + "' is not supported (only input_text and output_text)");
    if (i > 1) out += '\n';
    out += text;
  }
  return std::nullopt;
}

// One item of `input`. A reasoning item's text waits in `reasoning` for the assistant turn it precedes.
MaybeError read_item(JsonValue& v, const std::string& at, std::vector<TemplateMessage>& msgs,
                     std::string& reasoning) {
  od::object o;
  if (v.get_object().get(o)) return bad_field(at, "must be an object");
  std::string type, role, content, call_id, name, arguments, output;
  bool have_content = false;
  auto err = for_each_field_at(o, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
    if (is_null(fv)) return std::nullopt;
    if (k == "type") return read_string(fv, at + ".type", type);
    if (k == "role") return read_string(fv, at + ".role", role);
    if (k == "content") {
      have_content = true;
      return read_content(fv, at + ".content", content);
    }
    if (k == "call_id") return read_string(fv, at + ".call_id", call_id);
    if (k == "name") return read_string(fv, at + ".name", name);
    if (k == "arguments") return read_string(fv, at + ".arguments", arguments);
    if (k == "output") return read_content(fv, at + ".output", output);
    return std::nullopt;
  });
  if (err) return err;
  if (type.empty() || type == "message") {
    if (role == "developer") role = "system";
    if (role != "user" && role != "assistant" && role != "system")
      return bad_field(at + ".role", "must be one of user, assistant, system, developer; got '" + role + "'");
    if (!have_content) return bad_field(at + ".content", "is required");
    msgs.push_back({role, content, "", role == "assistant" ? std::exchange(reasoning, {}) : "", {}});
    return std::nullopt;
  }
  if (type == "function_call") {
    if (name.empty()) return bad_field(at + ".name", "is required");
    if (call_id.empty()) return bad_field(at + ".call_id", "is required");
    // Calls join the assistant turn they belong to (the text before them, or earlier calls).
    if (msgs.empty() || msgs.back().role != "assistant") msgs.push_back({"assistant", "", "", "", {}});
    msgs.back().reasoning += std::exchange(reasoning, {});
    msgs.back().calls.push_back({call_id, name, arguments.empty() ? "{}" : arguments});
    return std::nullopt;
  }
  if (type == "function_call_output") {
    if (call_id.empty()) return bad_field(at + ".call_id", "is required");
    msgs.push_back({"tool", output, call_id, "", {}});
    return std::nullopt;
  }
  if (type == "reasoning") {
    reasoning += content;
    return std::nullopt;
  }
  return bad_field(at + ".type", "input item type '" + type +
                                     "' is not supported (message, function_call, function_call_output)");
}

MaybeError parse_input(JsonValue& v, std::vector<TemplateMessage>& msgs) {
  od::json_type t;
  if (v.type().get(t)) return bad_field("input", "is not valid JSON");
  if (t == od::json_type::string) {
    TemplateMessage m{"user", "", "", "", {}};
    if (auto e = read_string(v, "input", m.content)) return e;
    msgs.push_back(std::move(m));
    return std::nullopt;
  }
  od::array arr;
  if (t != od::json_type::array || v.get_array().get(arr))
    return bad_field("input", "must be a string or an array of input items");
  size_t i = 0;
  std::string reasoning;
  for (auto el : arr) {
    JsonValue ev;
    if (el.get(ev)) return bad_field("input", "is not valid JSON");
    if (auto e = read_item(ev, "input[" + std::to_string(i++) + "]", msgs, reasoning)) return e;
  }
  if (i == 0) return bad_field("input", "must contain at least one item");
  return std::nullopt;
}

// Responses tools are flat ({"type":"function","name","description","parameters","strict"}); the
// template takes the chat-completions shape.
MaybeError parse_tools(JsonValue& v, std::string& echo, std::string& chat_tools) {
  od::json_type t;
  if (v.type().get(t) || t != od::json_type::array)
    return bad_field("tools", "must be an array of tool objects");
  if (auto e = read_raw(v, "tools", echo)) return e;
  od::parser p;
  simdjson::padded_string padded(echo);
  od::document doc;
  od::array arr;
  if (p.iterate(padded).get(doc) || doc.get_array().get(arr)) return bad_field("tools", "is not valid JSON");
  JsonWriter w;
  w.begin_array();
  size_t i = 0;
  for (auto el : arr) {
    const std::string at = "tools[" + std::to_string(i++) + "]";
    od::object o;
    if (el.get_object().get(o)) return bad_field(at, "must be an object");
    std::string type, name, desc, params = R"({"type":"object","properties":{}})";
    auto err = for_each_field_at(o, at, [&](std::string_view k, JsonValue& fv) -> MaybeError {
      if (is_null(fv)) return std::nullopt;
      if (k == "type") return read_string(fv, at + ".type", type);
      if (k == "name") return read_string(fv, at + ".name", name);
      if (k == "description") return read_string(fv, at + ".description", desc);
      if (k == "parameters") return read_raw(fv, at + ".parameters", params);
      return std::nullopt;
    });
    if (err) return err;
    if (type != "function")
      return bad_field(at + ".type", "tool type '" + type + "' is not supported (only 'function')");
    if (name.empty()) return bad_field(at + ".name", "is required");
    w.begin_object().key("type").value("function").key("function").begin_object();
    w.key("name").value(name);
    if (!desc.empty()) w.key("description").value(desc);
    w.key("parameters").raw(params).end_object().end_object();
  }
  w.end_array();
  chat_tools = i ? w.take() : std::string();
  return std::nullopt;
}

MaybeError parse_tool_choice(JsonValue& v, std::string& choice, std::string& echo) {
  const char* what = "must be 'none', 'auto', 'required' or {\"type\":\"function\",\"name\":...}";
  if (auto e = read_raw(v, "tool_choice", echo)) return e;
  od::json_type t;
  if (v.type().get(t)) return bad_field("tool_choice", "is not valid JSON");
  od::parser p;
  simdjson::padded_string padded(echo);
  od::document doc;
  if (p.iterate(padded).get(doc)) return bad_field("tool_choice", what);
  std::string_view s;
  if (!doc.get_string().get(s)) {
    if (s != "none" && s != "auto" && s != "required") return bad_field("tool_choice", what);
    choice = std::string(s);
    return std::nullopt;
  }
  od::parser p2;
  od::document doc2;
  od::object o;
  std::string_view type, name;
  if (p2.iterate(padded).get(doc2) || doc2.get_object().get(o) || o["type"].get_string().get(type) ||
      type != "function" || o["name"].get_string().get(name) || name.empty())
    return bad_field("tool_choice", what);
  choice = std::string(name);
  return std::nullopt;
}

// A sampling float as the client wrote it (0.7, not the float's 0.699999988079071).
double echo(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", double(x));
  return std::strtod(buf, nullptr);
}

MaybeError unsupported(const std::string& field, const std::string& why) {
  return bad_field(field, why + " is not supported by this server");
}

}  // namespace

MaybeError parse_responses_request(std::string_view body, ResponsesRequest& out) {
  std::vector<TemplateMessage> msgs;
  bool have_input = false;
  auto& c = out.common;
  c.max_tokens_key = "max_output_tokens";
  auto err = for_each_body_field(body, "request body", [&](std::string_view key, JsonValue& v) -> MaybeError {
    if (is_null(v)) return std::nullopt;
    // The sampling fields this API has (and astrai's extensions), read as chat completions reads them.
    if (key == "model" || key == "temperature" || key == "top_p" || key == "top_k" || key == "min_p" ||
        key == "seed" || key == "stream" || key == "frequency_penalty" || key == "presence_penalty" ||
        key == "repetition_penalty" || key == "ignore_eos" || key == "logit_bias") {
      bool handled = false;
      return parse_common_field(key, v, c, handled);
    }
    if (key == "input") {
      have_input = true;
      return parse_input(v, msgs);
    }
    if (key == "instructions") return read_string(v, "instructions", out.instructions.emplace());
    if (key == "max_output_tokens") {
      int64_t n = 0;
      if (auto e = read_int(v, "max_output_tokens", 1, 1 << 30, n)) return e;
      c.max_tokens = int(n);
      return std::nullopt;
    }
    if (key == "tools") return parse_tools(v, out.tools_echo, out.tools_json);
    if (key == "tool_choice") return parse_tool_choice(v, out.tool_choice, out.tool_choice_echo);
    if (key == "parallel_tool_calls") return read_bool(v, "parallel_tool_calls", out.parallel_tool_calls);
    if (key == "chat_template_kwargs") return parse_template_kwargs(v, out.template_kwargs_json);
    if (key == "metadata") {
      od::json_type t;
      if (v.type().get(t) || t != od::json_type::object) return bad_field("metadata", "must be an object");
      return read_raw(v, "metadata", out.metadata_echo);
    }
    if (key == "store") {
      bool store = false;
      if (auto e = read_bool(v, "store", store)) return e;
      if (store) return unsupported("store", "storing responses (store: true)");
      return std::nullopt;
    }
    if (key == "background") {
      bool bg = false;
      if (auto e = read_bool(v, "background", bg)) return e;
      if (bg) return unsupported("background", "running in the background (background: true)");
      return std::nullopt;
    }
    if (key == "previous_response_id")
      return unsupported("previous_response_id", "continuing a stored response (previous_response_id)");
    if (key == "conversation") return unsupported("conversation", "a stored conversation");
    if (key == "prompt") return unsupported("prompt", "a stored prompt template");
    if (key == "top_logprobs") return unsupported("top_logprobs", "top_logprobs on /v1/responses");
    if (key == "max_tool_calls") return unsupported("max_tool_calls", "max_tool_calls");
    if (key == "include") {
      od::array arr;
      if (v.get_array().get(arr)) return bad_field("include", "must be an array");
      for (auto el : arr) {
        (void)el;
        return unsupported("include", "including extra output data (include)");
      }
      return std::nullopt;
    }
    if (key == "truncation") {
      std::string t;
      if (auto e = read_string(v, "truncation", t)) return e;
      if (t != "disabled") return unsupported("truncation", "truncation '" + t + "' (only 'disabled')");
      return std::nullopt;
    }
    if (key == "text") {
      // text.format: plain text, or structured output as chat's response_format has it (verbosity is
      // accepted and ignored).
      od::object o;
      if (v.get_object().get(o)) return bad_field("text", "must be an object");
      return for_each_field_at(o, "text", [&](std::string_view k, JsonValue& fv) -> MaybeError {
        if (k != "format" || is_null(fv)) return std::nullopt;
        od::json_type t;
        if (fv.type().get(t) || t != od::json_type::object)
          return bad_field("text.format", "must be an object with a 'type'");
        if (auto e = read_raw(fv, "text.format", out.text_format_echo)) return e;
        od::parser p;
        simdjson::padded_string padded(out.text_format_echo);
        od::document doc;
        JsonValue format;
        if (p.iterate(padded).get(doc) || doc.get_value().get(format))
          return bad_field("text.format", "is not valid JSON");
        return field_error(structured::read_text_format(format, "text.format", c.constraint));
      });
    }
    if (key == "reasoning") {
      od::json_type t;
      if (v.type().get(t) || t != od::json_type::object) return bad_field("reasoning", "must be an object");
      return std::nullopt;  // effort / summary: the model reasons as its template and parser say
    }
    return std::nullopt;  // unknown fields are ignored, as on the other OpenAI routes
  });
  if (err) return err;
  if (!have_input) return bad_field("input", "is required");

  JsonWriter w;
  w.begin_array();
  if (out.instructions)
    w.begin_object().key("role").value("system").key("content").value(*out.instructions).end_object();
  for (const auto& m : msgs) {
    w.begin_object().key("role").value(m.role).key("content").value(m.content);
    if (!m.calls.empty()) {
      w.key("tool_calls").begin_array();
      for (const auto& call : m.calls) {
        w.begin_object()
            .key("id")
            .value(call.id)
            .key("type")
            .value("function")
            .key("function")
            .begin_object();
        w.key("name").value(call.name).key("arguments").value(call.arguments).end_object().end_object();
      }
      w.end_array();
    }
    if (!m.tool_call_id.empty()) w.key("tool_call_id").value(m.tool_call_id);
    if (!m.reasoning.empty()) w.key("reasoning_content").value(m.reasoning);
    w.end_object();
  }
  w.end_array();
  out.messages_json = w.take();
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Response formatting

namespace {

class ResponsesFormatter final : public ResponseFormatter {
 public:
  ResponsesFormatter(const ResponsesRequest& req, std::string model, ReasoningMode reasoning)
      : req_(req),
        model_(std::move(model)),
        id_(random_id("resp_")),
        created_(int64_t(std::time(nullptr))),
        tools_(!req.tools_json.empty() && req.tool_choice != "none"),
        reasoning_(reasoning),
        splitter_(reasoning.starts_inside) {}

  bool streaming() const override { return req_.common.stream; }

  std::string begin() override {
    if (!streaming()) return {};
    std::string out;
    event(out, "response.created", [&](JsonWriter& w) {
      w.key("response");
      write_response(w, "in_progress", nullptr);
    });
    event(out, "response.in_progress", [&](JsonWriter& w) {
      w.key("response");
      write_response(w, "in_progress", nullptr);
    });
    return out;
  }

  std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation&) override {
    std::string out;
    for (const auto& d : deltas) {
      if (d.choice != 0) continue;
      const bool last = d.finish != FinishReason::none;
      if (last) finish_ = d.finish;
      if (!streaming()) {
        if (reasoning_.enabled)
          splitter_.append(d.text, int(d.tokens.size()));
        else
          text_ += d.text;
        continue;
      }
      ReasoningSplit split;
      if (reasoning_.enabled)
        split = splitter_.feed(d.text, last, int(d.tokens.size()));
      else
        split.content = d.text;
      if (!split.reasoning.empty()) {
        if (open_ < 0 || items_[size_t(open_)].kind != Kind::reasoning) open_item(out, Kind::reasoning);
        items_.back().text += split.reasoning;
        event(out, "response.reasoning_text.delta", [&](JsonWriter& w) {
          part_address(w);
          w.key("delta").value(split.reasoning);
        });
      }
      ToolParse parsed;
      if (tools_)
        parsed = parser_.feed(split.content, last);
      else
        parsed.content = std::move(split.content);
      if (!parsed.content.empty()) {
        if (open_ < 0 || items_[size_t(open_)].kind != Kind::message) open_item(out, Kind::message);
        items_.back().text += parsed.content;
        event(out, "response.output_text.delta", [&](JsonWriter& w) {
          part_address(w);
          w.key("delta").value(parsed.content).key("logprobs").begin_array().end_array();
        });
      }
      for (auto& call : parsed.calls) add_call(out, std::move(call));
    }
    return out;
  }

  std::string end(const Generation& g) override {
    std::string out;
    if (streaming()) {
      close_item(out);
      if (items_.empty()) {  // nothing generated: still one (empty) message, as OpenAI answers
        open_item(out, Kind::message);
        close_item(out);
      }
      const char* status = finish_ == FinishReason::length ? "incomplete" : "completed";
      event(out, std::string("response.") + status, [&](JsonWriter& w) {
        w.key("response");
        write_response(w, status, &g);
      });
      return out;
    }
    ReasoningSplit split;
    if (reasoning_.enabled)
      split = splitter_.take();
    else
      split.content = std::move(text_);
    ToolParse parsed;
    if (tools_)
      parsed = parse_tool_calls(split.content);
    else
      parsed.content = std::move(split.content);
    if (!split.reasoning.empty())
      items_.push_back(Item{Kind::reasoning, random_id("rs_"), split.reasoning, {}});
    std::string_view content = parsed.content;
    if (!parsed.calls.empty())
      while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.remove_suffix(1);
    if (!content.empty() || parsed.calls.empty())
      items_.push_back(Item{Kind::message, random_id("msg_"), std::string(content), {}});
    for (auto& call : parsed.calls)
      items_.push_back(Item{Kind::function_call, random_id("fc_"), "", std::move(call)});
    JsonWriter w;
    write_response(w, finish_ == FinishReason::length ? "incomplete" : "completed", &g);
    return w.take();
  }

 private:
  enum class Kind { message, reasoning, function_call };
  struct Item {
    Kind kind;
    std::string id;
    std::string text;  // message / reasoning text
    ToolCall call;     // function_call
  };

  template <typename Fill>
  void event(std::string& out, const std::string& type, Fill&& fill) {
    JsonWriter w;
    w.begin_object().key("type").value(type);
    fill(w);
    w.key("sequence_number").value(seq_++).end_object();
    append_sse(out, w.str(), type);
  }

  void part_address(JsonWriter& w) const {
    w.key("item_id").value(items_[size_t(open_)].id).key("output_index").value(open_);
    w.key("content_index").value(0);
  }

  void write_part(JsonWriter& w, const Item& it) const {
    if (it.kind == Kind::reasoning) {
      w.begin_object().key("type").value("reasoning_text").key("text").value(it.text).end_object();
      return;
    }
    w.begin_object().key("type").value("output_text").key("text").value(it.text);
    w.key("annotations").begin_array().end_array().key("logprobs").begin_array().end_array().end_object();
  }

  void write_item(JsonWriter& w, const Item& it, bool done) const {
    const char* status = done ? "completed" : "in_progress";
    w.begin_object().key("id").value(it.id);
    switch (it.kind) {
      case Kind::message:
        w.key("type").value("message").key("status").value(status).key("role").value("assistant");
        w.key("content").begin_array();
        if (done) write_part(w, it);
        w.end_array();
        break;
      case Kind::reasoning:
        w.key("type").value("reasoning").key("summary").begin_array().end_array();
        w.key("content").begin_array();
        if (done) write_part(w, it);
        w.end_array();
        break;
      case Kind::function_call:
        w.key("type").value("function_call").key("status").value(status);
        w.key("call_id").value(it.call.id).key("name").value(it.call.name);
        w.key("arguments").value(done ? it.call.arguments_json : std::string());
        break;
    }
    w.end_object();
  }

  void open_item(std::string& out, Kind kind) {
    close_item(out);
    items_.push_back(Item{kind, random_id(kind == Kind::message ? "msg_" : "rs_"), "", {}});
    open_ = int(items_.size()) - 1;
    const Item& it = items_.back();
    event(out, "response.output_item.added", [&](JsonWriter& w) {
      w.key("output_index").value(open_).key("item");
      write_item(w, it, false);
    });
    event(out, "response.content_part.added", [&](JsonWriter& w) {
      part_address(w);
      w.key("part");
      write_part(w, it);
    });
  }

  void close_item(std::string& out) {
    if (open_ < 0) return;
    const Item& it = items_[size_t(open_)];
    const bool reasoning = it.kind == Kind::reasoning;
    event(out, reasoning ? "response.reasoning_text.done" : "response.output_text.done", [&](JsonWriter& w) {
      part_address(w);
      w.key("text").value(it.text);
      if (!reasoning) w.key("logprobs").begin_array().end_array();
    });
    event(out, "response.content_part.done", [&](JsonWriter& w) {
      part_address(w);
      w.key("part");
      write_part(w, it);
    });
    event(out, "response.output_item.done", [&](JsonWriter& w) {
      w.key("output_index").value(open_).key("item");
      write_item(w, it, true);
    });
    open_ = -1;
  }

  void add_call(std::string& out, ToolCall call) {
    close_item(out);
    items_.push_back(Item{Kind::function_call, random_id("fc_"), "", std::move(call)});
    const int index = int(items_.size()) - 1;
    const Item& it = items_.back();
    event(out, "response.output_item.added", [&](JsonWriter& w) {
      w.key("output_index").value(index).key("item");
      write_item(w, it, false);
    });
    event(out, "response.function_call_arguments.delta", [&](JsonWriter& w) {
      w.key("item_id")
          .value(it.id)
          .key("output_index")
          .value(index)
          .key("delta")
          .value(it.call.arguments_json);
    });
    event(out, "response.function_call_arguments.done", [&](JsonWriter& w) {
      w.key("item_id").value(it.id).key("output_index").value(index).key("name").value(it.call.name);
      w.key("arguments").value(it.call.arguments_json);
    });
    event(out, "response.output_item.done", [&](JsonWriter& w) {
      w.key("output_index").value(index).key("item");
      write_item(w, it, true);
    });
  }

  // The response object; `g` null while in progress (no output or usage yet).
  void write_response(JsonWriter& w, const char* status, const Generation* g) const {
    const auto& s = req_.common.sampling;
    w.begin_object().key("id").value(id_).key("object").value("response").key("created_at").value(created_);
    w.key("status").value(status).key("background").value(false).key("error").null();
    w.key("incomplete_details");
    if (std::string_view(status) == "incomplete")
      w.begin_object().key("reason").value("max_output_tokens").end_object();
    else
      w.null();
    w.key("instructions");
    if (req_.instructions)
      w.value(*req_.instructions);
    else
      w.null();
    w.key("max_output_tokens");
    if (req_.common.max_tokens > 0)
      w.value(req_.common.max_tokens);
    else
      w.null();
    w.key("model").value(model_).key("output").begin_array();
    if (g)
      for (const auto& it : items_) write_item(w, it, true);
    w.end_array();
    w.key("parallel_tool_calls").value(req_.parallel_tool_calls).key("previous_response_id").null();
    w.key("reasoning").begin_object().key("effort").null().key("summary").null().end_object();
    w.key("store").value(false).key("temperature").value(echo(s.temperature));
    w.key("text").begin_object().key("format").raw(req_.text_format_echo).end_object();
    w.key("tool_choice").raw(req_.tool_choice_echo).key("tools").raw(req_.tools_echo);
    w.key("top_p").value(echo(s.top_p)).key("truncation").value("disabled");
    w.key("usage");
    if (g) {
      w.begin_object().key("input_tokens").value(g->prompt_tokens());
      w.key("input_tokens_details").begin_object().key("cached_tokens").value(0).end_object();
      w.key("output_tokens").value(g->completion_tokens());
      w.key("output_tokens_details")
          .begin_object()
          .key("reasoning_tokens")
          .value(splitter_.reasoning_tokens());
      w.end_object();
      w.key("total_tokens").value(g->prompt_tokens() + g->completion_tokens()).end_object();
    } else {
      w.null();
    }
    w.key("user").null().key("metadata").raw(req_.metadata_echo).end_object();
  }

  const ResponsesRequest req_;
  std::string model_, id_;
  int64_t created_;
  bool tools_;
  ReasoningMode reasoning_;
  ReasoningSplitter splitter_;
  ToolCallStreamParser parser_;
  std::string text_;  // non-streaming without a reasoning parser: the output
  FinishReason finish_ = FinishReason::none;
  std::vector<Item> items_;
  int open_ = -1;  // streaming: the message / reasoning item receiving deltas
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<ResponseFormatter> make_responses_formatter(const ResponsesRequest& req,
                                                            const std::string& model,
                                                            ReasoningMode reasoning) {
  return std::make_unique<ResponsesFormatter>(req, model, reasoning);
}

}  // namespace astrai::net
