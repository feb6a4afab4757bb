// ChatTemplate on top of the Jinja interpreter, with the environment transformers renders chat
// templates in: variables messages, tools (None when not given, as transformers passes it),
// documents (None), add_generation_prompt, bos_token, eos_token, plus the globals
// raise_exception(msg) and strftime_now(fmt).
#include "src/tokenizer/chat_template.h"

#include <ctime>

#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_interp.h"
#include "src/tokenizer/jinja_json.h"
#include "src/tokenizer/jinja_parser.h"

namespace astrai {
namespace {

using jinja::Value;

Value strftime_now(jinja::CallArgs& a) {
  Value fmt = a.get(0, "format");
  if (!fmt.is_string()) jinja::type_error("strftime_now() argument must be str");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), fmt.str().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

class JinjaChatTemplate final : public ChatTemplate {
 public:
  JinjaChatTemplate(jinja::Body body, const ChatTemplateLimits& limits)
      : body_(std::move(body)), limits_(limits) {}

  const ChatTemplateLimits& limits() const override { return limits_; }

  Result<std::string> render(const ChatTemplateInput& in) const override {
    // The budget outlives every value of this render (declared first, destroyed last); the input
    // messages count against it too.
    jinja::Budget budget(limits_);
    jinja::BudgetScope scope(budget);
    try {
      return render_in_budget(in);
    } catch (const jinja::LimitError& e) {
      return resource_exhausted(std::string("chat template: ") + e.what());
    } catch (const jinja::RenderError& e) {
      // raise_exception() is the template talking to the user: pass its message on unchanged.
      if (e.type() == "TemplateError") return invalid_argument(e.what());
      return invalid_argument(std::string("chat template: ") + e.type() + ": " + e.what());
    } catch (const std::bad_alloc&) {
      return resource_exhausted("chat template: out of memory while rendering");
    } catch (const std::exception& e) {  // e.g. std::length_error from a huge str.center()
      return internal_error(std::string("chat template: ") + e.what());
    }
  }

 private:
  Result<std::string> render_in_budget(const ChatTemplateInput& in) const {
    auto vars = std::make_shared<jinja::DictData>();
    auto set = [&](const char* k, Value v) { vars->set(Value::string(k), std::move(v)); };
    auto messages = jinja::value_from_json(in.messages_json);
    if (!messages.ok()) return Status(messages.status().code(), "messages: " + messages.status().message());
    if (!messages->is_list()) return invalid_argument("messages: expected a JSON array");
    set("messages", *messages);
    if (in.tools_json.empty()) {
      set("tools", Value::none());
    } else {
      auto tools = jinja::value_from_json(in.tools_json);
      if (!tools.ok()) return Status(tools.status().code(), "tools: " + tools.status().message());
      set("tools", *tools);
    }
    set("documents", Value::none());
    set("add_generation_prompt", Value::boolean(in.add_generation_prompt));
    set("bos_token", Value::string(in.bos_token));
    set("eos_token", Value::string(in.eos_token));
    set("raise_exception", Value::callable("raise_exception", [](jinja::CallArgs& a) -> Value {
          throw jinja::RenderError("TemplateError", jinja::to_str(a.get(0, "message")));
        }));
    set("strftime_now", Value::callable("strftime_now", strftime_now));
    if (!in.extra_context_json.empty()) {
      auto extra = jinja::value_from_json(in.extra_context_json);
      if (!extra.ok()) return Status(extra.status().code(), "extra context: " + extra.status().message());
      if (!extra->is_dict()) return invalid_argument("extra context: expected a JSON object");
      for (const auto& [k, v] : extra->dict_data().items) vars->set(k, v);
    }
    return jinja::render(body_, *vars, limits_);
  }

  jinja::Body body_;
  ChatTemplateLimits limits_;
};

}  // namespace

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::parse(std::string_view source,
                                                          const ChatTemplateLimits& limits) {
  auto body = jinja::parse_template(source, limits);
  if (!body.ok()) return body.status();
  return std::unique_ptr<ChatTemplate>(std::make_unique<JinjaChatTemplate>(std::move(body).value(), limits));
}

}  // namespace astrai
