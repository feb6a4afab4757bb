#include "chat_template_reference.h"

#include <simdjson.h>

#include <catch2/catch.hpp>

#include "src/core/json_writer.h"
#include "src/tokenizer/chat_template.h"
#include "tools/test_util.h"

namespace astrai::test {

namespace {
// One line of JSON (the reference reads one case per line).
std::string minified(const std::string& json) {
  simdjson::dom::parser p;
  simdjson::dom::element el;
  if (p.parse(json).get(el) != simdjson::SUCCESS)
    throw std::runtime_error("test case has invalid JSON: " + json);
  return simdjson::minify(el);
}
}  // namespace

std::vector<RenderOutcome> render_with_jinja2(const std::vector<TemplateCase>& cases) {
  std::string input;
  for (const auto& c : cases) {
    JsonWriter w;
    w.begin_object().key("template").value(c.tmpl).key("messages").raw(minified(c.messages_json));
    if (!c.tools_json.empty()) w.key("tools").raw(minified(c.tools_json));
    w.key("add_generation_prompt").value(c.add_generation_prompt);
    w.key("bos_token").value(c.bos_token).key("eos_token").value(c.eos_token);
    if (!c.extra_json.empty()) w.key("extra").raw(minified(c.extra_json));
    w.end_object();
    input += w.str() + "\n";
  }
  const std::string script = (source_dir() / "tests/tokenizer/chat_template_ref.py").string();
  CommandResult r = run_command(python3() + " '" + script + "'", input);
  if (r.exit_code != 0) throw std::runtime_error("chat_template_ref.py failed: " + r.err);
  std::vector<RenderOutcome> out;
  simdjson::dom::parser parser;
  size_t pos = 0;
  while (pos < r.out.size()) {
    size_t nl = r.out.find('\n', pos);
    std::string line = r.out.substr(pos, nl - pos);
    pos = nl == std::string::npos ? r.out.size() : nl + 1;
    simdjson::dom::element doc = parser.parse(line);
    RenderOutcome o;
    std::string_view sv;
    if (doc["text"].get_string().get(sv) == simdjson::SUCCESS) {
      o.ok = true;
      o.text = std::string(sv);
    } else {
      o.error = std::string(std::string_view(doc["error"].get_string()));
      o.type = std::string(std::string_view(doc["type"].get_string()));
    }
    out.push_back(std::move(o));
  }
  if (out.size() != cases.size()) throw std::runtime_error("chat_template_ref.py: wrong number of results");
  return out;
}

RenderOutcome render_with_astrai(const TemplateCase& c) {
  RenderOutcome o;
  auto t = ChatTemplate::parse(c.tmpl);
  if (!t.ok()) {
    o.error = t.status().message();
    return o;
  }
  ChatTemplateInput in;
  in.messages_json = c.messages_json;
  in.tools_json = c.tools_json;
  in.add_generation_prompt = c.add_generation_prompt;
  in.bos_token = c.bos_token;
  in.eos_token = c.eos_token;
  in.extra_context_json = c.extra_json;
  auto r = (*t)->render(in);
  if (!r.ok()) {
    o.error = r.status().message();
    return o;
  }
  o.ok = true;
  o.text = *r;
  return o;
}

size_t expect_same_as_jinja2(const std::vector<TemplateCase>& cases, std::vector<bool>* flags) {
  std::vector<RenderOutcome> ref = render_with_jinja2(cases);
  if (flags) {
    flags->clear();
    for (const auto& r : ref) flags->push_back(r.ok);
  }
  size_t rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const TemplateCase& c = cases[i];
    RenderOutcome ours = render_with_astrai(c);
    INFO("case " << i << " '" << c.name << "'\ntemplate: " << c.tmpl << "\nmessages: " << c.messages_json
                 << "\ntools: " << c.tools_json << "\nadd_generation_prompt: " << c.add_generation_prompt);
    if (ref[i].ok) {
      ++rendered;
      INFO("our error: " << ours.error);
      CHECK(ours.ok);
      CHECK(ours.text == ref[i].text);
    } else {
      INFO("jinja2 raised " << ref[i].type << ": " << ref[i].error
                            << "\nours: " << (ours.ok ? ours.text : ours.error));
      CHECK(!ours.ok);
      if (ref[i].type == "TemplateError") CHECK(ours.error == ref[i].error);
    }
  }
  return rendered;
}

}  // namespace astrai::test
