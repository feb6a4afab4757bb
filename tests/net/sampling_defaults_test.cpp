// A model's generation_config.json sampling fields as the server's defaults (--generation-config
// auto, the default): a request that leaves a field out gets the model's value, one that sends it
// keeps its own, and `none` keeps the built-in defaults. top_k 1 makes the model's default greedy,
// so "the default was applied" reads as "equals a temperature-0 request".
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "net/server_fixture.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

// The tiny preset, its generation_config.json also setting top_k 1 and max_new_tokens 7.
void write_model(const std::filesystem::path& dir) {
  const CommandResult init = run_command(astrai_bin() + " init --preset tiny --out '" + dir.string() + "'");
  INFO(init.err);
  REQUIRE(init.exit_code == 0);
  std::string gen = read_file(dir / "generation_config.json");
  const size_t close = gen.rfind('}');
  REQUIRE(close != std::string::npos);
  gen = gen.substr(0, close) + R"(, "top_k": 1, "max_new_tokens": 7, "temperature": 1.0, "do_sample": true})";
  write_file(dir / "generation_config.json", gen);
}

struct Completion {
  std::string text;
  int64_t tokens = -1;
};

Completion complete(int port, const std::string& fields) {
  const HttpReply r = http(port, "POST", "/v1/completions",
                           R"({"prompt":[5,17,99,3,250,42],"ignore_eos":true)" + fields + "}");
  INFO(r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  auto doc = p.parse(r.body);
  Completion c;
  c.text = std::string(std::string_view(doc["choices"].at(0)["text"]));
  c.tokens = int64_t(doc["usage"]["completion_tokens"]);
  return c;
}

std::string message_text(int port, const std::string& fields) {
  const HttpReply r =
      http(port, "POST", "/v1/messages",
           R"({"max_tokens":7,"messages":[{"role":"user","content":"hello there"}],"ignore_eos":true)" +
               fields + "}");
  INFO(r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  return std::string(std::string_view(p.parse(r.body)["content"].at(0)["text"]));
}

}  // namespace

TEST_CASE("generation_config.json's sampling fields are the server's defaults; a request's own fields win",
          "[integration]") {
  TempDir dir("gencfg");
  const std::filesystem::path model = dir / "model";
  write_model(model);
  ServerProcess s({"--model", model.string()}, /*tiny_preset=*/false);
  const Completion greedy = complete(s.port(), R"(,"temperature":0,"max_tokens":7)");
  REQUIRE(greedy.tokens == 7);
  // Leaving top_k and max_tokens out: the model's top_k 1 (greedy whatever the seed) and 7 tokens.
  for (const char* seed : {R"(,"seed":1)", R"(,"seed":2)"}) {
    const Completion c = complete(s.port(), seed);
    CHECK(c.tokens == 7);
    CHECK(c.text == greedy.text);
  }
  // Sent fields win: top_k 0 (off) samples at temperature 1, and max_tokens is the request's.
  const Completion sampled = complete(s.port(), R"(,"top_k":0,"seed":1,"max_tokens":7)");
  CHECK(sampled.text != greedy.text);
  CHECK(complete(s.port(), R"(,"max_tokens":3)").tokens == 3);
  // null counts as left out.
  CHECK(complete(s.port(), R"(,"top_k":null,"seed":3)").text == greedy.text);
  // The Anthropic route starts from the same defaults.
  CHECK(message_text(s.port(), R"(,"seed":4)") == message_text(s.port(), R"(,"temperature":0)"));
  // The start-up log (stdout) says which defaults apply.
  CHECK(read_file(s.log_path() + ".out")
            .find("sampling defaults from generation_config.json: temperature 1, top_k 1, max_tokens 7") !=
        std::string::npos);

  ServerProcess plain({"--model", model.string(), "--generation-config", "none"}, /*tiny_preset=*/false);
  const Completion own = complete(plain.port(), R"(,"seed":1,"max_tokens":7)");
  CHECK(own.text == complete(plain.port(), R"(,"top_k":0,"seed":1,"max_tokens":7)").text);
  CHECK(own.text != greedy.text);
}
