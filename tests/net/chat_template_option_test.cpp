// `astrai serve --chat-template` (serve.yaml chat_template): a file or the template text, in place
// of the model's; one that is missing or does not parse stops the server at start-up, saying why.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "net/server_fixture.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

std::string applied(int port) {
  const HttpReply r =
      http(port, "POST", "/apply-template",
           R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
  INFO(r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  return std::string(std::string_view(p.parse(r.body)["text"]));
}

}  // namespace

TEST_CASE("serve --chat-template replaces the model's template; a bad one stops start-up", "[integration]") {
  TempDir t("tmplopt");
  write_file(
      t / "t.jinja",
      "T:{% for m in messages %}[{{ m.role }}|{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>"
      "{% endif %}");
  {
    ServerProcess s({"--chat-template", (t / "t.jinja").string()});
    CHECK(applied(s.port()) == "T:[user|hi]>");
    // The chat route renders with it too: its prompt is that text's tokens.
    const HttpReply tok =
        http(s.port(), "POST", "/tokenize", R"({"text": "T:[user|hi]>", "add_special_tokens": false})");
    simdjson::dom::parser p;
    const int64_t count = int64_t(p.parse(tok.body)["count"]);
    const HttpReply chat = http(s.port(), "POST", "/v1/chat/completions",
                                R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})");
    INFO(chat.body);
    REQUIRE(chat.status == 200);
    simdjson::dom::parser p2;
    CHECK(int64_t(p2.parse(chat.body)["usage"]["prompt_tokens"]) == count);
  }
  {
    // serve.yaml, the template text itself.
    write_file(t / "serve.yaml", "chat_template: \"X{{ messages[0].content }}\"\n");
    ServerProcess s({"--config", (t / "serve.yaml").string()});
    CHECK(applied(s.port()) == "Xhi");
  }
  for (const auto& [value, says] : std::vector<std::pair<std::string, std::string>>{
           {(t / "missing.jinja").string(), "no such file"},
           {"{% if %}", "--chat-template"},
       }) {
    INFO(value);
    const CommandResult r = run_command(
        astrai_bin() + " serve --preset tiny --port 0 --threads 1 --chat-template '" + value + "'");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(says) != std::string::npos);
  }
}
