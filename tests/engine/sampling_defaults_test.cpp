// generation_config.json's sampling fields (src/engine/sampling_defaults.h): which it reads, which it
// leaves out with a warning, and the errors for files that are not what they claim to be.
#include "src/engine/sampling_defaults.h"

#include <catch2/catch.hpp>

#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

TEST_CASE("sampling defaults: Qwen3's generation_config.json, applied over the built-in ones", "[unit]") {
  // Qwen3-8B's file as published.
  const char* qwen3 = R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
    "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})";
  std::vector<std::string> warnings;
  const SamplingDefaults d = parse_sampling_defaults(qwen3, "g.json", &warnings).value();
  CHECK(warnings.empty());
  CHECK(d.temperature == 0.6f);
  CHECK(d.top_p == 0.95f);
  CHECK(d.top_k == 20);
  CHECK_FALSE(d.min_p);
  CHECK_FALSE(d.repetition_penalty);
  CHECK_FALSE(d.max_tokens);
  CHECK(d.describe() == "temperature 0.6, top_p 0.95, top_k 20");
  SamplingParams s;
  s.min_p = 0.25f;
  s.seed = 9;
  d.apply(s);
  CHECK(s.temperature == 0.6f);
  CHECK(s.top_p == 0.95f);
  CHECK(s.top_k == 20);
  CHECK(s.min_p == 0.25f);  // not in the file: left as it was
  CHECK(s.seed == 9u);

  const SamplingDefaults all =
      parse_sampling_defaults(
          R"({"min_p": 0.05, "repetition_penalty": 1.1, "max_new_tokens": 512, "top_k": null})", "g.json")
          .value();
  CHECK(all.min_p == 0.05f);
  CHECK(all.repetition_penalty == 1.1f);
  CHECK(all.max_tokens == 512);
  CHECK_FALSE(all.top_k);
  CHECK(parse_sampling_defaults(R"({"eos_token_id": 2})", "g.json").value().empty());
}

TEST_CASE("sampling defaults: values outside the engine's ranges are left out with a warning; bad files fail",
          "[unit]") {
  std::vector<std::string> warnings;
  const SamplingDefaults d =
      parse_sampling_defaults(
          R"({"temperature": -1, "top_p": 0, "top_k": -5, "min_p": 2, "repetition_penalty": 0,)"
          R"( "max_new_tokens": 0, "top_k_extra": 3, "temperature_hint": "x"})",
          "m/generation_config.json", &warnings)
          .value();
  CHECK(d.empty());
  REQUIRE(warnings.size() == 6);
  CHECK(warnings[0] == "m/generation_config.json: temperature must be >= 0, got -1; not used");
  CHECK_THAT(warnings[1], Catch::Contains("top_p") && Catch::Contains("(0, 1]"));
  CHECK_THAT(warnings[5], Catch::Contains("max_new_tokens") && Catch::Contains("at least 1"));

  auto error = [](const char* text) { return parse_sampling_defaults(text, "m/g.json").status().message(); };
  CHECK_THAT(error(R"({"temperature": "warm"})"),
             Catch::Contains("m/g.json") && Catch::Contains("'temperature'"));
  CHECK_THAT(error(R"({"top_k": 2.5})"), Catch::Contains("'top_k'"));
  CHECK_THAT(error("[1, 2]"), Catch::Contains("m/g.json") && Catch::Contains("not a JSON object"));
  CHECK_THAT(error("{\"top_k\": "), Catch::Contains("m/g.json"));
}

TEST_CASE("sampling defaults from a model directory: none without the file", "[unit]") {
  TempDir dir("gencfg");
  CHECK(read_sampling_defaults(dir.path()).value().empty());
  write_file(dir / "generation_config.json", R"({"temperature": 0.7})");
  CHECK(read_sampling_defaults(dir.path()).value().temperature == 0.7f);
}
