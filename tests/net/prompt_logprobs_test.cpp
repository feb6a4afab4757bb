// /v1/completions with echo and logprobs: the legacy API's prompt logprobs (what evaluation
// harnesses sum as a loglikelihood), checked against `astrai score` on the same ids, which computes
// them with one plain forward outside the engine.
#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <sstream>

#include "net/server_fixture.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

// `astrai score`'s logprobs of ids[1..] (its own forward of the whole text), on `device` (the
// server's: with ASTRAI_TEST_SERVE_ARGS="--device cuda", or where auto finds a GPU).
std::vector<double> score(const std::vector<int32_t>& ids, const std::string& device) {
  TempDir t("score");
  write_file(t / "in.jsonl", R"({"id": 1, "ids": )" + ids_json(ids) + "}\n");
  const CommandResult r =
      run_command(astrai_bin() + " score --model tiny --threads 1 --device " + device + " --input '" +
                  (t / "in.jsonl").string() + "' --output '" + (t / "out.jsonl").string() + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser p;
  std::vector<double> lp;
  for (auto x : simdjson::dom::array(p.parse(read_file(t / "out.jsonl"))["logprobs"]))
    lp.push_back(double(x));
  return lp;
}

// How far the server's prompt logprobs may lie from score's: the same f32 arithmetic on the CPU; on a
// GPU, bf16 GEMMs whose shapes differ (the server runs the prompt as one step's chunk, score as one
// forward), which moves a logprob by a few hundredths (docs/performance.md).
double tolerance(const std::string& device) {
  return device == "cpu" ? 1e-4 : 0.1;
}

// A choice's legacy logprobs object: token_logprobs and top_logprobs, the first of each null.
void check_choice(simdjson::dom::element lp, const std::vector<double>& ref, size_t generated, size_t k,
                  double tol) {
  simdjson::dom::array tl = lp["token_logprobs"], top = lp["top_logprobs"], tokens = lp["tokens"];
  REQUIRE(tl.size() == ref.size() + 1 + generated);
  CHECK(tokens.size() == tl.size());
  CHECK(tl.at(0).is_null());
  CHECK(top.at(0).is_null());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("prompt token " << i + 1);
    CHECK(std::abs(double(tl.at(i + 1)) - ref[i]) < tol);
    // The prompt token itself may be among the k alternatives or not; there are k of them (the
    // tiny model's byte tokens decode to distinct pieces, most of the time: at most k).
    const size_t n = simdjson::dom::object(top.at(i + 1)).size();
    CHECK(n >= 1);
    CHECK(n <= k);
  }
}

}  // namespace

TEST_CASE(
    "completions with echo and logprobs report the prompt tokens' logprobs, as astrai score computes them",
    "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(size_t(std::uniform_int_distribution<int>(5, 40)(rng)));
  for (auto& t : ids) t = int32_t(rng() % 250);
  ServerProcess s;
  const std::string device = s.device();
  INFO("device " << device);
  REQUIRE_FALSE(device.empty());
  const double tol = tolerance(device);
  const std::vector<double> ref = score(ids, device);
  REQUIRE(ref.size() == ids.size() - 1);
  // lm-evaluation-harness's loglikelihood request: [[ids]], max_tokens 1, logprobs 1, echo.
  const HttpReply r =
      http(s.port(), "POST", "/v1/completions",
           R"({"prompt": [)" + ids_json(ids) +
               R"(], "max_tokens": 1, "logprobs": 1, "echo": true, "temperature": 0, "n": 2})");
  INFO(r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.body);
  simdjson::dom::array choices = doc["choices"];
  REQUIRE(choices.size() == 2);
  for (auto c : choices) check_choice(c["logprobs"], ref, 1, 1, tol);
  CHECK(int64_t(doc["usage"]["prompt_tokens"]) == int64_t(ids.size()));

  // Streaming: the first chunk echoes the prompt with its logprobs, then the generated tokens follow.
  const HttpReply st =
      http(s.port(), "POST", "/v1/completions",
           R"({"prompt": )" + ids_json(ids) +
               R"(, "max_tokens": 2, "logprobs": 3, "echo": true, "temperature": 0, "stream": true})");
  REQUIRE(st.status == 200);
  const size_t at = st.body.find("data: ");
  REQUIRE(at != std::string::npos);
  const std::string first = st.body.substr(at + 6, st.body.find('\n', at) - at - 6);
  INFO(first);
  simdjson::dom::parser p2;
  check_choice(p2.parse(first)["choices"].at(0)["logprobs"], ref, 0, 3, tol);
  // text_offset runs on across the chunks: the echoed prompt's pieces from 0, then the generated ones.
  std::vector<uint64_t> offsets;
  std::istringstream lines(st.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    simdjson::dom::parser pc;
    for (auto o : simdjson::dom::array(pc.parse(line.substr(6))["choices"].at(0)["logprobs"]["text_offset"]))
      offsets.push_back(uint64_t(o));
  }
  REQUIRE(offsets.size() == ids.size() + 2);
  CHECK(offsets[0] == 0);
  CHECK(std::is_sorted(offsets.begin(), offsets.end()));
  CHECK(offsets.back() > offsets[ids.size() - 1]);  // the generated tokens come after the prompt's

  // max_tokens 0 with echo (the older harnesses' request): the prompt alone, nothing generated.
  const HttpReply po =
      http(s.port(), "POST", "/v1/completions",
           R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": 0, "logprobs": 2, "echo": true})");
  INFO(po.body);
  REQUIRE(po.status == 200);
  simdjson::dom::parser p4;
  simdjson::dom::element pd = p4.parse(po.body);
  check_choice(pd["choices"].at(0)["logprobs"], ref, 0, 2, tol);
  CHECK(std::string_view(pd["choices"].at(0)["finish_reason"]) == "length");
  CHECK(int64_t(pd["usage"]["completion_tokens"]) == 0);
  const HttpReply pos = http(s.port(), "POST", "/v1/completions",
                             R"({"prompt": )" + ids_json(ids) +
                                 R"(, "max_tokens": 0, "logprobs": 1, "echo": true, "stream": true})");
  REQUIRE(pos.status == 200);
  CHECK(pos.body.find(R"("finish_reason":"length")") != std::string::npos);
  CHECK(pos.body.find("data: [DONE]") != std::string::npos);
  CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": 0})")
            .status == 400);

  // Without echo the logprobs are the generated tokens' only.
  const HttpReply plain =
      http(s.port(), "POST", "/v1/completions",
           R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": 2, "logprobs": 1, "temperature": 0})");
  REQUIRE(plain.status == 200);
  simdjson::dom::parser p3;
  CHECK(simdjson::dom::array(p3.parse(plain.body)["choices"].at(0)["logprobs"]["token_logprobs"]).size() ==
        2);
}
