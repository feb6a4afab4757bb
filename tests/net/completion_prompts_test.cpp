// /v1/completions with a list of prompts (what lm-evaluation-harness and other batch clients send):
// one answer per prompt, its choices at p * n + j, each as the same prompt alone would get it.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <sstream>

#include "net/server_fixture.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

struct Answer {
  std::vector<std::string> text;              // by choice index
  std::vector<std::vector<double>> logprobs;  // token_logprobs (null as 0)
  std::vector<std::string> finish;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

Answer post(int port, const std::string& body) {
  const HttpReply r = http(port, "POST", "/v1/completions", body);
  INFO(body << "\n" << r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.body);
  Answer a;
  for (auto c : simdjson::dom::array(doc["choices"])) {
    const size_t i = size_t(int64_t(c["index"]));
    REQUIRE(i == a.text.size());  // in order, each once
    a.text.emplace_back(std::string_view(c["text"]));
    a.finish.emplace_back(std::string_view(c["finish_reason"]));
    std::vector<double> lp;
    simdjson::dom::element l = c["logprobs"];
    if (!l.is_null())
      for (auto x : simdjson::dom::array(l["token_logprobs"])) lp.push_back(x.is_null() ? 0.0 : double(x));
    a.logprobs.push_back(std::move(lp));
  }
  a.prompt_tokens = int64_t(doc["usage"]["prompt_tokens"]);
  a.completion_tokens = int64_t(doc["usage"]["completion_tokens"]);
  return a;
}

// A streamed answer, gathered by choice index: texts, finish reasons and the echoed prompts' logprob
// counts (the first chunk of each choice carries its prompt's tokens).
Answer post_stream(int port, const std::string& body) {
  const HttpReply r = http(port, "POST", "/v1/completions", body);
  INFO(body << "\n" << r.body);
  REQUIRE(r.status == 200);
  std::map<size_t, std::string> text, finish;
  std::map<size_t, std::vector<double>> lps;
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    simdjson::dom::parser p;
    simdjson::dom::element c = p.parse(line.substr(6))["choices"].at(0);
    const size_t i = size_t(int64_t(c["index"]));
    REQUIRE(finish[i].empty());  // nothing after a choice's last chunk
    text[i] += std::string_view(c["text"]);
    if (!c["finish_reason"].is_null()) finish[i] = std::string(std::string_view(c["finish_reason"]));
    simdjson::dom::element l = c["logprobs"];
    if (!l.is_null())
      for (auto x : simdjson::dom::array(l["token_logprobs"]))
        lps[i].push_back(x.is_null() ? 0.0 : double(x));
  }
  CHECK(r.body.find("data: [DONE]") != std::string::npos);
  Answer a;
  for (size_t i = 0; i < text.size(); ++i) {
    REQUIRE(text.count(i) == 1);
    a.text.push_back(text[i]);
    a.finish.push_back(finish[i]);
    a.logprobs.push_back(lps[i]);
  }
  return a;
}

}  // namespace

TEST_CASE("completions with a list of prompts answer each as the prompt alone, choice p * n + j",
          "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  ServerProcess s;
  const std::string device = s.device();
  INFO("device " << device);
  // Seeded sampling gives the same tokens whatever else runs beside a request; so does greedy.
  const std::string sampling = R"("max_tokens": 6, "ignore_eos": true, "n": 2, "temperature": 1, "seed": )" +
                               std::to_string(rng() % 1000000);
  const std::vector<std::string> prompts = {"The cat", "Once upon a time", "1 2 3", "x"};
  std::string list = "[";
  for (size_t p = 0; p < prompts.size(); ++p) list += (p ? ",\"" : "\"") + prompts[p] + "\"";
  list += "]";

  const Answer batch = post(s.port(), R"({"prompt": )" + list + ", " + sampling + "}");
  REQUIRE(batch.text.size() == prompts.size() * 2);
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    INFO("prompt " << p);
    const Answer one = post(s.port(), R"({"prompt": ")" + prompts[p] + "\", " + sampling + "}");
    REQUIRE(one.text.size() == 2);
    for (size_t j = 0; j < 2; ++j) {
      CHECK(batch.text[p * 2 + j] == one.text[j]);
      CHECK(batch.finish[p * 2 + j] == "length");
    }
    prompt_tokens += one.prompt_tokens;
    completion_tokens += one.completion_tokens;
  }
  CHECK(batch.prompt_tokens == prompt_tokens);
  CHECK(batch.completion_tokens == completion_tokens);

  // Streamed, the same texts by index.
  const Answer streamed =
      post_stream(s.port(), R"({"prompt": )" + list + ", " + sampling + R"(, "stream": true})");
  CHECK(streamed.text == batch.text);
  CHECK(streamed.finish == batch.finish);

  // Token-id prompts with echo and logprobs (the harness's loglikelihood batch): each choice starts
  // with its own prompt's logprobs, as that prompt alone gets them.
  std::vector<std::vector<int32_t>> ids(3);
  std::string id_list = "[";
  for (size_t p = 0; p < ids.size(); ++p) {
    ids[p].resize(size_t(std::uniform_int_distribution<int>(2, 30)(rng)));
    for (auto& t : ids[p]) t = int32_t(rng() % 250);
    id_list += (p ? "," : "") + ids_json(ids[p]);
  }
  id_list += "]";
  const std::string harness = R"(, "max_tokens": 1, "logprobs": 1, "echo": true, "temperature": 0})";
  const Answer lb = post(s.port(), R"({"prompt": )" + id_list + harness);
  REQUIRE(lb.text.size() == ids.size());
  const double tol = device == "cpu" ? 1e-5 : 0.1;  // bf16 on a GPU: steps of other shapes
  for (size_t p = 0; p < ids.size(); ++p) {
    INFO("prompt " << p);
    const Answer one = post(s.port(), R"({"prompt": )" + ids_json(ids[p]) + harness);
    REQUIRE(lb.logprobs[p].size() == ids[p].size() + 1);
    REQUIRE(one.logprobs[0].size() == lb.logprobs[p].size());
    for (size_t i = 0; i + 1 < ids[p].size(); ++i)
      CHECK(std::abs(lb.logprobs[p][i] - one.logprobs[0][i]) < tol);
  }
  const Answer ls = post_stream(s.port(), R"({"prompt": )" + id_list + R"(, "stream": true)" + harness);
  REQUIRE(ls.text.size() == ids.size());
  for (size_t p = 0; p < ids.size(); ++p) CHECK(ls.logprobs[p].size() == ids[p].size() + 1);
  // max_tokens 0: the prompts alone.
  const Answer only =
      post(s.port(), R"({"prompt": )" + id_list + R"(, "max_tokens": 0, "echo": true, "logprobs": 0})");
  REQUIRE(only.text.size() == ids.size());
  for (size_t p = 0; p < ids.size(); ++p) CHECK(only.logprobs[p].size() == ids[p].size());
  CHECK(only.completion_tokens == 0);

  // Bad prompts in a list: a 400 naming the one at fault, and nothing runs.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": ["a", 1]})", "prompt[1]"},
      {R"({"prompt": [[1, 2], [999999]]})", "prompt[1][0]"},
      {R"({"prompt": [[1, 2], []]})", "prompt[1]"},
      {R"({"prompt": []})", "prompt"},
  };
  for (const auto& [body, param] : bad) {
    INFO(body);
    const HttpReply r = http(s.port(), "POST", "/v1/completions", body);
    CHECK(r.status == 400);
    simdjson::dom::parser p;
    CHECK(std::string_view(p.parse(r.body)["error"]["param"]) == param);
  }
  // A prompt past the context window: a 400 that names it.
  std::string longest = R"({"prompt": [[1], [)";
  for (int i = 0; i < 5000; ++i) longest += (i ? ",7" : "7");
  const HttpReply too_long = http(s.port(), "POST", "/v1/completions", longest + "]]}");
  INFO(too_long.body);
  CHECK(too_long.status == 400);
  CHECK(too_long.body.find("prompt 1 has 5000 tokens") != std::string::npos);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}
