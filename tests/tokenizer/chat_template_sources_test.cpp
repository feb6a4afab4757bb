// Where a tokenizer's chat template comes from: `--chat-template` (a ChatTemplateText) over
// DIR/chat_template.jinja over tokenizer_config.json's "chat_template", as transformers orders the
// last two; `astrai template` (load_chat_template) reads the same file.
#include <catch2/catch.hpp>
#include <random>

#include "src/tokenizer/chat_template.h"
#include "src/tokenizer/chat_template_config.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

using namespace astrai;
using astrai::test::write_file;

namespace {

std::string render(const Tokenizer& t, const std::string& content) {
  REQUIRE(t.chat_template());
  ChatTemplateInput in;
  in.messages_json = R"([{"role": "user", "content": ")" + content + R"("}])";
  auto r = t.chat_template()->render(in);
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("chat_template.jinja wins over tokenizer_config.json, and --chat-template over both", "[unit]") {
  std::mt19937_64 rng(astrai::test::fresh_seed());
  const std::string word = "w" + std::to_string(rng() % 100000);
  astrai::test::TempDir dir("tmplsrc");
  write_file(dir / "tokenizer.json", builtin_tokenizer_json());
  write_file(dir / "tokenizer_config.json",
             R"({"chat_template": "CONFIG {{ messages[0]['content'] }}", "eos_token": "<|im_end|>"})");
  CHECK(render(*Tokenizer::load(dir.path()).value(), word) == "CONFIG " + word);

  write_file(dir / "chat_template.jinja", "JINJA {{ messages[0]['content'] }}\n");
  // (jinja2, as transformers runs it, drops a template's final newline)
  CHECK(render(*Tokenizer::load(dir.path()).value(), word) == "JINJA " + word);
  auto cli = load_chat_template(dir.path());  // `astrai template` agrees
  REQUIRE(cli.ok());
  CHECK(cli->source == "JINJA {{ messages[0]['content'] }}\n");
  CHECK(cli->eos_token == "<|im_end|>");  // the special tokens still come from the config

  const ChatTemplateText given{"GIVEN {{ messages[0]['content'] | upper }}", "--chat-template"};
  CHECK(render(*Tokenizer::load(dir.path(), {}, given).value(), word) ==
        "GIVEN " + std::string("W") + word.substr(1));

  // Without tokenizer_config.json the file still gives the template.
  std::filesystem::remove(dir / "tokenizer_config.json");
  CHECK(render(*Tokenizer::load(dir.path()).value(), word) == "JINJA " + word);

  // A template that does not parse leaves the tokenizer usable and names its source.
  write_file(dir / "chat_template.jinja", "{% if %}");
  auto broken = Tokenizer::load(dir.path());
  REQUIRE(broken.ok());
  CHECK((*broken)->chat_template() == nullptr);
  CHECK((*broken)->chat_template_status().message().find("chat_template.jinja") != std::string::npos);
  auto bad_given = Tokenizer::load(dir.path(), {}, ChatTemplateText{"{{ x", "--chat-template"});
  REQUIRE(bad_given.ok());
  CHECK((*bad_given)->chat_template_status().message().rfind("--chat-template: ", 0) == 0);
}

TEST_CASE("named templates: tool_use renders requests with tools, default the rest", "[unit]") {
  astrai::test::TempDir dir("tmplnamed");
  write_file(dir / "tokenizer.json", builtin_tokenizer_json());
  write_file(dir / "tokenizer_config.json",
             R"({"chat_template": [{"name": "tool_use", "template": "TOOLS {{ messages[0]['content'] }}"},
                                   {"name": "default", "template": "PLAIN {{ messages[0]['content'] }}"}]})");
  auto render_with = [](const Tokenizer& t, bool tools) {
    auto found = t.template_for(tools);
    REQUIRE(found.ok());
    ChatTemplateInput in;
    in.messages_json = R"([{"role": "user", "content": "x"}])";
    return (*found)->render(in).value();
  };
  auto t = Tokenizer::load(dir.path()).value();
  CHECK(render_with(*t, false) == "PLAIN x");
  CHECK(render_with(*t, true) == "TOOLS x");
  CHECK(render(*t, "x") == "PLAIN x");  // chat_template() is the default
  // transformers' files win over the config's, each for its name.
  std::filesystem::create_directories(dir / "additional_chat_templates");
  write_file(dir / "additional_chat_templates" / "tool_use.jinja", "FILE TOOLS {{ messages[0]['content'] }}");
  t = Tokenizer::load(dir.path()).value();
  CHECK(render_with(*t, true) == "FILE TOOLS x");
  CHECK(render_with(*t, false) == "PLAIN x");
  // `astrai template` picks them the same way.
  auto loaded = load_chat_template(dir.path());
  REQUIRE(loaded.ok());
  REQUIRE(loaded->tool_use);
  const std::string line = R"({"messages": [{"role": "user", "content": "x"}])";
  for (const auto& [input, want] : std::vector<std::pair<std::string, std::string>>{
           {line + "}", "PLAIN x"},
           {line + R"(, "tools": [{"type": "function", "function": {"name": "f"}}]})", "FILE TOOLS x"}}) {
    const auto r = astrai::test::run_command(
        astrai::test::astrai_bin() + " template --model '" + dir.path().string() + "'", input + "\n");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("\"text\":\"" + want + "\"") != std::string::npos);
  }
  // A template the user names renders both.
  t = Tokenizer::load(dir.path(), {},
                      ChatTemplateText{"MINE {{ messages[0]['content'] }}", "--chat-template"})
          .value();
  CHECK(render_with(*t, true) == "MINE x");
  CHECK(render_with(*t, false) == "MINE x");
  // Without named templates, tools render through the one template; without any, template_for says so.
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "ONE {{ messages[0]['content'] }}"})");
  std::filesystem::remove_all(dir / "additional_chat_templates");
  t = Tokenizer::load(dir.path()).value();
  CHECK(render_with(*t, true) == "ONE x");
  write_file(dir / "tokenizer_config.json", "{}");
  t = Tokenizer::load(dir.path()).value();
  auto none = t->template_for(true);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == ErrorCode::not_found);
  CHECK(none.status().message().find("no chat template") != std::string::npos);
}
