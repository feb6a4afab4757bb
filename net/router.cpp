#include "net/router.h"

#include <simdjson.h>

#include "net/anthropic_protocol.h"
#include "net/chat_page.h"
#include "net/dashboard_page.h"
#include "net/openai_protocol.h"
#include "net/responses_protocol.h"
#include "net/stats_routes.h"
#include "net/websocket_frames.h"
#include "src/core/json_writer.h"
#include "src/tokenizer/chat_template.h"

namespace astrai::net {
namespace od = simdjson::ondemand;

GenerationSlot GenerationSlot::acquire(ServerState& s) {
  GenerationSlot slot;
  // inflight counts generations only; a compare-exchange loop keeps it <= max_concurrent.
  int64_t cur = s.inflight.load(std::memory_order_relaxed);
  do {
    if (cur >= s.config.max_concurrent) return slot;
  } while (!s.inflight.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel));
  slot.state_ = &s;
  return slot;
}

void GenerationSlot::release() {
  if (state_) state_->inflight.fetch_sub(1, std::memory_order_acq_rel);
  state_ = nullptr;
}

HttpResponse error_response(const ApiError& e, Dialect d) {
  HttpResponse r;
  r.status = e.status;
  r.body = d == Dialect::anthropic ? anthropic_error_body(e) : openai_error_body(e);
  if (e.status == 429 || e.status == 503) r.headers.emplace_back("Retry-After", "1");
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

ApiError submit_error(const Status& s) {
  switch (s.code()) {
    case ErrorCode::invalid_argument: return ApiError{400, s.message(), "", "invalid_request_error", ""};
    case ErrorCode::resource_exhausted:
      return ApiError{503, "the server is overloaded (" + s.message() + "); retry later", "",
                      "server_overloaded", ""};
    default: return ApiError{500, s.message(), "", "server_error", ""};
  }
}

std::optional<ApiError> check_api_key(const HttpRequest& req, const ServerState& state) {
  const std::string& key = state.config.api_key;
  if (key.empty()) return std::nullopt;
  std::string_view auth = req.header("authorization");
  if (auth.size() > 7 && (auth.substr(0, 7) == "Bearer " || auth.substr(0, 7) == "bearer ") &&
      auth.substr(7) == key)
    return std::nullopt;
  if (req.header("x-api-key") == key) return std::nullopt;
  return ApiError{401,
                  "invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')", "",
                  "authentication_error", "invalid_api_key"};
}

namespace {

HttpResponse json_response(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

RouteResult error(const ApiError& e, Dialect d) {
  return RouteResult{error_response(e, d), std::nullopt};
}

std::optional<ApiError> not_ready(const ServerState& st) {
  if (st.is_ready()) return std::nullopt;
  if (st.load_failed.load(std::memory_order_acquire))
    return ApiError{503, std::string(kModelLoadFailed) + st.load_error, "", "server_error", ""};
  return ApiError{503, "the model is still loading; retry shortly", "", "server_error", ""};
}

std::optional<ApiError> check_model(const std::string& model, const ServerState& st) {
  if (model.empty() || model == st.model_name) return std::nullopt;
  return ApiError{404, "the model '" + model + "' does not exist; this server serves '" + st.model_name + "'",
                  "model", "invalid_request_error", "model_not_found"};
}

// A generation request's fields start from the model's sampling defaults (generation_config.json),
// which the fields the client sends then override.
void seed_defaults(CommonParams& c, const ServerState& st) {
  st.sampling_defaults.apply(c.sampling);
  if (st.sampling_defaults.max_tokens) c.max_tokens = *st.sampling_defaults.max_tokens;
}

GenerationSpec spec_from(const CommonParams& c) {
  GenerationSpec s;
  s.sampling = c.sampling;
  s.max_tokens = c.max_tokens;
  s.n = c.n;
  s.stop = c.stop;
  s.ignore_eos = c.ignore_eos;
  s.stop_ids = c.stop_ids;
  s.include_stop_str_in_output = c.include_stop_str_in_output;
  s.skip_special_tokens = c.skip_special_tokens;
  s.constraint = c.constraint;
  return s;
}

// Renders the model's chat template and tokenizes the prompt it produces.
// `kwargs`: chat_template_kwargs, a JSON object of extra template variables ("" for none).
std::optional<ApiError> render_prompt(const ServerState& st, const std::string& messages,
                                      const std::string& tools, bool add_generation_prompt, std::string& text,
                                      const std::string& kwargs = {}) {
  auto found = st.tokenizer->template_for(!tools.empty());
  if (!found.ok())
    return ApiError{
        400,
        found.status().message() + "; use /v1/completions with a plain prompt, or serve with --chat-template",
        "messages", "invalid_request_error", ""};
  const ChatTemplate* t = *found;
  ChatTemplateInput in;
  in.messages_json = messages;
  in.tools_json = tools;
  in.add_generation_prompt = add_generation_prompt;
  in.extra_context_json = kwargs;
  const auto& sp = st.tokenizer->special_tokens();
  in.bos_token = sp.bos_token;
  in.eos_token = sp.eos_token;
  auto r = t->render(in);
  if (!r.ok())
    return ApiError{400, "chat template: " + r.status().message(), "messages", "invalid_request_error", ""};
  text = std::move(r).value();
  return std::nullopt;
}

std::optional<ApiError> take_slot(ServerState& st, GenerationJob& job) {
  job.slot = GenerationSlot::acquire(st);
  if (job.slot) return std::nullopt;
  st.metrics.rejected_overload.fetch_add(1, std::memory_order_relaxed);
  return ApiError{429,
                  "too many concurrent requests (max_concurrent=" + std::to_string(st.config.max_concurrent) +
                      "); retry later",
                  "", "rate_limit_exceeded", "rate_limit_exceeded"};
}

RouteResult chat_completions(const HttpRequest& req, ServerState& st) {
  ChatRequest cr;
  seed_defaults(cr.common, st);
  if (auto e = parse_chat_request(req.body, cr)) return error(*e, Dialect::openai);
  if (auto e = check_model(cr.common.model, st)) return error(*e, Dialect::openai);
  std::string prompt;
  const std::string tools = cr.tool_choice == "none" ? std::string() : cr.tools_json;
  if (auto e = render_prompt(st, cr.messages_json, tools, cr.add_generation_prompt, prompt,
                             cr.template_kwargs_json))
    return error(*e, Dialect::openai);
  GenerationJob job;
  job.spec = spec_from(cr.common);
  job.spec.prompt = st.tokenizer->encode(prompt, /*add_special_tokens=*/false);
  job.fmt = make_chat_formatter(cr, st.model_name, *st.tokenizer, reasoning_mode(st.reasoning, prompt));
  if (auto e = validate_common(cr.common)) return error(*e, Dialect::openai);
  if (auto e = take_slot(st, job)) return error(*e, Dialect::openai);
  return RouteResult{{}, std::move(job)};
}

RouteResult completions(const HttpRequest& req, ServerState& st) {
  CompletionRequest cr;
  seed_defaults(cr.common, st);
  if (auto e = parse_completion_request(req.body, cr)) return error(*e, Dialect::openai);
  if (auto e = check_model(cr.common.model, st)) return error(*e, Dialect::openai);
  GenerationJob job;
  job.spec = spec_from(cr.common);
  const bool several = cr.prompts.size() > 1;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> prompts;
  const int32_t vocab = st.tokenizer->vocab_size();
  for (size_t p = 0; p < cr.prompts.size(); ++p) {
    const CompletionPrompt& cp = cr.prompts[p];
    const std::string field = several ? "prompt[" + std::to_string(p) + "]" : "prompt";
    std::vector<int32_t> ids;
    if (cp.is_ids) {
      for (size_t i = 0; i < cp.ids.size(); ++i)
        if (cp.ids[i] >= vocab)
          return error(bad_field(field + "[" + std::to_string(i) + "]",
                                 "token id " + std::to_string(cp.ids[i]) +
                                     " is outside the vocabulary (size " + std::to_string(vocab) + ")"),
                       Dialect::openai);
      ids = cp.ids;
      texts.push_back(cr.echo ? st.tokenizer->decode(cp.ids, false) : std::string());
    } else {
      ids = st.tokenizer->encode(cp.text, true);
      texts.push_back(cp.text);
    }
    if (ids.empty()) return error(bad_field(field, "must not be empty"), Dialect::openai);
    prompts.push_back(std::move(ids));
  }
  // echo with logprobs: the legacy API reports the prompt tokens' logprobs too (a loglikelihood).
  const bool prompt_logprobs = cr.echo && cr.logprobs >= 0;
  if (prompt_logprobs) job.spec.prompt_logprobs = cr.logprobs;
  job.fmt = make_completion_formatter(cr, st.model_name, *st.tokenizer, std::move(texts),
                                      prompt_logprobs ? prompts : std::vector<std::vector<int32_t>>{});
  job.spec.prompt = std::move(prompts.front());
  job.spec.more_prompts.assign(std::make_move_iterator(prompts.begin() + 1),
                               std::make_move_iterator(prompts.end()));
  if (auto e = validate_common(cr.common)) return error(*e, Dialect::openai);
  if (auto e = take_slot(st, job)) return error(*e, Dialect::openai);
  return RouteResult{{}, std::move(job)};
}

RouteResult messages(const HttpRequest& req, ServerState& st) {
  MessagesRequest mr;
  seed_defaults(mr.common, st);
  if (auto e = parse_messages_request(req.body, mr, true)) return error(*e, Dialect::anthropic);
  if (auto e = check_model(mr.common.model, st)) return error(*e, Dialect::anthropic);
  std::string prompt;
  const std::string tools = mr.tool_choice_none ? std::string() : mr.tools_json;
  if (auto e = render_prompt(st, mr.messages_json, tools, true, prompt, mr.template_kwargs_json))
    return error(*e, Dialect::anthropic);
  GenerationJob job;
  job.dialect = Dialect::anthropic;
  job.spec = spec_from(mr.common);
  job.spec.prompt = st.tokenizer->encode(prompt, false);
  job.fmt = make_messages_formatter(mr, st.model_name, reasoning_mode(st.reasoning, prompt));
  if (auto e = validate_common(mr.common)) return error(*e, Dialect::anthropic);
  if (auto e = take_slot(st, job)) return error(*e, Dialect::anthropic);
  return RouteResult{{}, std::move(job)};
}

RouteResult responses(const HttpRequest& req, ServerState& st) {
  ResponsesRequest rr;
  seed_defaults(rr.common, st);
  if (auto e = parse_responses_request(req.body, rr)) return error(*e, Dialect::openai);
  if (auto e = check_model(rr.common.model, st)) return error(*e, Dialect::openai);
  std::string prompt;
  const std::string tools = rr.tool_choice == "none" ? std::string() : rr.tools_json;
  if (auto e = render_prompt(st, rr.messages_json, tools, true, prompt, rr.template_kwargs_json))
    return error(*e, Dialect::openai);
  GenerationJob job;
  job.spec = spec_from(rr.common);
  job.spec.prompt = st.tokenizer->encode(prompt, false);
  job.fmt = make_responses_formatter(rr, st.model_name, reasoning_mode(st.reasoning, prompt));
  if (auto e = validate_common(rr.common)) return error(*e, Dialect::openai);
  if (auto e = take_slot(st, job)) return error(*e, Dialect::openai);
  return RouteResult{{}, std::move(job)};
}

RouteResult count_tokens(const HttpRequest& req, ServerState& st) {
  MessagesRequest mr;
  if (auto e = parse_messages_request(req.body, mr, false)) return error(*e, Dialect::anthropic);
  if (auto e = check_model(mr.common.model, st)) return error(*e, Dialect::anthropic);
  std::string prompt;
  if (auto e = render_prompt(st, mr.messages_json, mr.tools_json, true, prompt, mr.template_kwargs_json))
    return error(*e, Dialect::anthropic);
  return RouteResult{json_response(count_tokens_body(int(st.tokenizer->encode(prompt, false).size()))),
                     std::nullopt};
}

// /tokenize {"text"|"prompt": str, "add_special_tokens"?: bool} or {"messages": [...],
// "chat_template_kwargs"?: {...}} -> {"tokens", "count"}
RouteResult tokenize(const HttpRequest& req, ServerState& st) {
  std::string text, messages, kwargs;
  bool have_text = false, add_special = true, have_messages = false;
  auto err =
      for_each_body_field(req.body, "request body", [&](std::string_view k, JsonValue& v) -> MaybeError {
        if (k == "text" || k == "prompt") {
          have_text = true;
          return read_string(v, std::string(k), text);
        }
        if (k == "add_special_tokens") return read_bool(v, "add_special_tokens", add_special);
        if (k == "messages") {
          have_messages = true;
          return parse_chat_messages(v, messages);
        }
        if (k == "chat_template_kwargs" && !is_null(v)) return parse_template_kwargs(v, kwargs);
        return std::nullopt;
      });
  if (err) return error(*err, Dialect::openai);
  if (!have_text && !have_messages)
    return error(bad_field("text", "is required (or 'messages')"), Dialect::openai);
  if (have_messages) {
    if (auto e = render_prompt(st, messages, "", true, text, kwargs)) return error(*e, Dialect::openai);
    add_special = false;
  }
  const auto ids = st.tokenizer->encode(text, add_special);
  JsonWriter w;
  w.begin_object().key("tokens").begin_array();
  for (int32_t id : ids) w.value(int(id));
  w.end_array().key("count").value(int(ids.size())).key("max_model_len").value(st.engine->max_model_len());
  w.end_object();
  return RouteResult{json_response(w.take()), std::nullopt};
}

// /detokenize {"tokens"|"ids": [int]} -> {"text"}
RouteResult detokenize(const HttpRequest& req, ServerState& st) {
  std::vector<int32_t> ids;
  bool have = false;
  const int32_t vocab = st.tokenizer->vocab_size();
  auto err =
      for_each_body_field(req.body, "request body", [&](std::string_view k, JsonValue& v) -> MaybeError {
        if (k != "tokens" && k != "ids") return std::nullopt;
        have = true;
        od::array arr;
        if (v.get_array().get(arr)) return bad_field(std::string(k), "must be an array of token ids");
        return read_token_ids(arr, std::string(k), vocab - 1, ids);
      });
  if (err) return error(*err, Dialect::openai);
  if (!have) return error(bad_field("tokens", "is required"), Dialect::openai);
  JsonWriter w;
  w.begin_object().key("text").value(st.tokenizer->decode(ids, false)).end_object();
  return RouteResult{json_response(w.take()), std::nullopt};
}

// /apply-template {messages, tools?, add_generation_prompt?} -> {"text"}
RouteResult apply_template(const HttpRequest& req, ServerState& st) {
  ChatRequest cr;
  cr.add_generation_prompt = false;  // the contract's default for templates
  if (auto e = parse_chat_request(req.body, cr)) return error(*e, Dialect::openai);
  std::string text;
  if (auto e = render_prompt(st, cr.messages_json, cr.tools_json, cr.add_generation_prompt, text,
                             cr.template_kwargs_json))
    return error(*e, Dialect::openai);
  JsonWriter w;
  w.begin_object().key("text").value(text).end_object();
  return RouteResult{json_response(w.take()), std::nullopt};
}

// POST /flush_cache (SGLang's name) -> {"freed_pages", "cached_pages", "pages_used"}: every
// prefix-cache page no running request uses goes back to the pool. The engine does it on its step
// loop between steps; what running requests hold stays cached and is counted in cached_pages.
RouteResult flush_cache(const HttpRequest&, ServerState& st) {
  const int freed = st.engine->flush_prefix_cache();
  const EngineStats s = st.engine->stats();
  JsonWriter w;
  w.begin_object()
      .key("freed_pages")
      .value(freed)
      .key("cached_pages")
      .value(s.prefix_cached_pages)
      .key("pages_used")
      .value(s.kv_pages_used)
      .end_object();
  return RouteResult{json_response(w.take()), std::nullopt};
}

RouteResult health(const ServerState& st) {
  if (st.is_ready() && !st.draining.load(std::memory_order_relaxed))
    return RouteResult{json_response(R"({"status":"ok"})"), std::nullopt};
  JsonWriter w;
  const bool failed = st.load_failed.load(std::memory_order_acquire);
  w.begin_object().key("status").value(st.is_ready() ? "draining" : failed ? "error" : "loading");
  if (failed) w.key("message").value(st.load_error);
  w.end_object();
  HttpResponse r = json_response(w.take(), 503);
  r.headers.emplace_back("Retry-After", "1");
  return RouteResult{std::move(r), std::nullopt};
}

RouteResult method_not_allowed(const char* allow) {
  HttpResponse r = error_response(
      ApiError{405, "method not allowed; use " + std::string(allow), "", "invalid_request_error", ""},
      Dialect::openai);
  r.headers.emplace_back("Allow", allow);
  return RouteResult{std::move(r), std::nullopt};
}

}  // namespace

Dialect dialect_of(std::string_view target) {
  return target.starts_with("/v1/messages") ? Dialect::anthropic : Dialect::openai;
}

RouteResult route(const HttpRequest& req, ServerState& st) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  const Dialect d = dialect_of(p);

  if (m == "OPTIONS") {  // CORS preflight
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    return RouteResult{std::move(r), std::nullopt};
  }
  // Open routes: liveness, the chat page and the dashboard, Prometheus scraping.
  if (p == "/health") return m == "GET" ? health(st) : method_not_allowed("GET");
  if (p == "/") {
    if (m != "GET") return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(chat_page_html());
    return RouteResult{std::move(r), std::nullopt};
  }
  if (p == "/dashboard") {  // the page itself; the /stats it polls needs the API key
    if (m != "GET") return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(dashboard_page_html());
    return RouteResult{std::move(r), std::nullopt};
  }
  if (p == "/metrics") {
    if (m != "GET") return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_text(st);
    return RouteResult{std::move(r), std::nullopt};
  }

  struct Route {
    const char* path;
    const char* method;
    RouteResult (*fn)(const HttpRequest&, ServerState&);
  };
  static const Route routes[] = {
      {"/v1/chat/completions", "POST", chat_completions},
      {"/v1/completions", "POST", completions},
      {"/v1/messages", "POST", messages},
      {"/v1/responses", "POST", responses},
      {"/v1/messages/count_tokens", "POST", count_tokens},
      {"/tokenize", "POST", tokenize},
      {"/detokenize", "POST", detokenize},
      {"/apply-template", "POST", apply_template},
      {"/flush_cache", "POST", flush_cache},
      {"/v1/models", "GET",
       [](const HttpRequest&, ServerState& s) {
         return RouteResult{json_response(models_body(s.model_name, s.engine->max_model_len())),
                            std::nullopt};
       }},
      {"/stats", "GET",
       [](const HttpRequest&, ServerState& s) {
         return RouteResult{json_response(stats_json(s)), std::nullopt};
       }},
  };
  for (const auto& r : routes) {
    if (p != r.path) continue;
    if (m != r.method) return method_not_allowed(r.method);
    if (auto e = check_api_key(req, st)) return error(*e, d);
    if (auto e = not_ready(st)) return error(*e, d);
    if (st.draining.load(std::memory_order_relaxed) && std::string_view(r.method) == "POST")
      return error(ApiError{503, "the server is shutting down", "", "server_error", ""}, d);
    return r.fn(req, st);
  }
  return error(ApiError{404, "no route for " + m + " " + p, "", "invalid_request_error", "not_found"}, d);
}

std::optional<ApiError> websocket_generate_job(std::string_view frame, ServerState& st, GenerationJob& job) {
  if (auto e = not_ready(st)) return e;
  ChatRequest cr;
  seed_defaults(cr.common, st);
  if (auto e = parse_chat_request(frame, cr)) return e;
  if (auto e = check_model(cr.common.model, st)) return e;
  std::string prompt;
  const std::string tools = cr.tool_choice == "none" ? std::string() : cr.tools_json;
  if (auto e = render_prompt(st, cr.messages_json, tools, cr.add_generation_prompt, prompt,
                             cr.template_kwargs_json))
    return e;
  job.spec = spec_from(cr.common);
  job.spec.prompt = st.tokenizer->encode(prompt, false);
  if (auto e = validate_common(cr.common)) return e;
  return take_slot(st, job);
}

}  // namespace astrai::net
