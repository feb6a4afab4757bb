// `astrai bench prefill`, `bench decode`, `bench serve` and `bench linear` end to end on the CPU: the JSON
// line and the errors.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "src/model/config.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1,
                  end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

}  // namespace

TEST_CASE("bench prefill: chunked prompts over page boundaries, one JSON result per length",
          "[integration]") {
  const CommandResult r =
      run_command(astrai_bin() +
                  " bench prefill --preset tiny --device cpu --threads 1 --prompt-len 40,17 "
                  "--chunk 16 --reps 2");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.parse(last_line(r.out));
  CHECK(std::string_view(doc["bench"]) == "prefill");
  CHECK(int64_t(doc["chunk"]) == 16);
  const simdjson::dom::array results = doc["results"];
  REQUIRE(results.size() == 2);
  int64_t expect[] = {40, 17}, i = 0;
  for (simdjson::dom::element e : results) {
    CHECK(int64_t(e["prompt_len"]) == expect[i++]);
    CHECK(double(e["ms"]) > 0);
    // At least --reps timed prefills, at most 20.
    CHECK(int64_t(e["reps"]) >= 2);
    CHECK(int64_t(e["reps"]) <= 20);
    // tok/s and ms describe the same prefill.
    CHECK(double(e["tok_per_s"]) * double(e["ms"]) / 1e3 ==
          Approx(double(int64_t(e["prompt_len"]))).epsilon(1e-9));
  }
}

TEST_CASE("bench prefill: bad lengths and chunks are refused with the option named", "[integration]") {
  const std::string base = astrai_bin() + " bench prefill --preset tiny --device cpu --threads 1 ";
  const CommandResult zero = run_command(base + "--prompt-len 8,0");
  CHECK(zero.exit_code != 0);
  CHECK_THAT(zero.err, Catch::Contains("--prompt-len: '0' is not a positive integer"));
  const CommandResult chunk = run_command(base + "--prompt-len 8 --chunk -1");
  CHECK(chunk.exit_code != 0);
  CHECK_THAT(chunk.err, Catch::Contains("--chunk"));
  const CommandResult longer = run_command(base + "--prompt-len 1000000");
  CHECK(longer.exit_code != 0);
  CHECK_THAT(longer.err, Catch::Contains("exceeds the model's context"));
}

TEST_CASE("bench serve: token-id prompts through /v1/completions stream every requested token",
          "[integration]") {
  const CommandResult r =
      run_command(astrai_bin() +
                  " bench serve --model tiny --threads 1 --concurrency 2 --requests 4 "
                  "--max-tokens 5 --prompt-tokens 40 --level-seconds 60 --server-option max-batch-size=1");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.parse(last_line(r.out));
  CHECK(std::string_view(doc["bench"]) == "serve");
  CHECK(int64_t(doc["prompt_tokens"]) == 40);
  const simdjson::dom::array levels = doc["levels"];
  REQUIRE(levels.size() == 1);
  for (simdjson::dom::element e : levels) {
    CHECK(int64_t(e["concurrency"]) == 2);
    CHECK(int64_t(e["requests"]) == 4);
    CHECK(int64_t(e["failed"]) == 0);
    // ignore_eos: every request streams its 5 tokens (the usage chunks' counts).
    CHECK(int64_t(e["tokens"]) == 4 * 5);
    // logprobs 0: each token arrives in a chunk of its own, timed whether it has text or not.
    CHECK(int64_t(e["token_events"]) == 4 * 5);
    CHECK(double(e["tokens_per_s"]) > 0);
  }
}

TEST_CASE("bench serve: a --server-log left by an earlier run is not read for the server's port",
          "[integration]") {
  TempDir dir("bench-serve-log");
  const auto log = dir / "server.log";
  // What an earlier run's log holds: its server's port (here one nothing listens on).
  write_file(log, "[00:00:00.000] [info] listening on http://127.0.0.1:1 (1 net thread, 1 worker threads)\n");
  const CommandResult r = run_command(astrai_bin() +
                                      " bench serve --model tiny --threads 1 --concurrency 1 --requests 2 "
                                      "--max-tokens 2 --prompt-tokens 4 --level-seconds 60 --server-log " +
                                      log.string());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string kept = read_file(log);
  CHECK_THAT(kept, !Catch::Contains("127.0.0.1:1 ") && Catch::Contains("listening on"));
}

TEST_CASE("bench serve: a model the server cannot load fails the bench at once, with the server's reason",
          "[integration]") {
  TempDir dir("bench-serve-bad");
  const std::string model = (dir / "m").string();
  REQUIRE(run_command(astrai_bin() + " init --preset tiny --out " + model).exit_code == 0);
  // A vocabulary smaller than the tokenizer's ids: the server starts, then fails to load the model.
  std::string config = read_file(dir / "m" / "config.json");
  const size_t at = config.find("\"vocab_size\"");
  REQUIRE(at != std::string::npos);
  const size_t colon = config.find(':', at), end = config.find_first_of(",}", colon);
  config.replace(colon + 1, end - colon - 1, " 100");
  write_file(dir / "m" / "config.json", config);
  const CommandResult r = run_command(astrai_bin() + " bench serve --model " + model +
                                      " --threads 1 --concurrency 1 --max-tokens 2");
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("could not load the model") && Catch::Contains("vocab_size = 100"));
  // The reason is the loader's own, without the prefix the server's exit line puts before it.
  CHECK_THAT(r.err, !Catch::Contains("the model failed to load"));
}

TEST_CASE("bench serve: requests the server refuses fail the bench with the server's answer, at once",
          "[integration]") {
  TempDir dir("bench-serve-refused");
  const std::string model = (dir / "m").string();
  REQUIRE(run_command(astrai_bin() + " init --preset tiny --out " + model).exit_code == 0);
  // Four pages of 16 tokens cannot hold a 128-token prompt: the server answers each request 400 on a
  // connection it keeps open (a keep-alive error answer, not a stream).
  const CommandResult r =
      run_command(astrai_bin() + " bench serve --model " + model +
                  " --threads 1 --concurrency 2 --requests 4 --prompt-tokens 128 --max-tokens 4" +
                  " --server-option max-pages=4 --server-option page-size=16");
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("4 of 4 requests failed") && Catch::Contains("HTTP 400") &&
                        Catch::Contains("needs 9 KV pages but the cache holds only 4"));
  CHECK_THAT(r.out, Catch::Contains("\"requests\":0,\"failed\":4"));
}

TEST_CASE("bench decode: each batch's floor is the weights and its K/V rows over the measured bandwidth",
          "[integration]") {
  const astrai::ModelConfig cfg = astrai::preset_config("tiny").value();
  const int prompt = 24, tokens = 5;
  const CommandResult r = run_command(astrai_bin() + " bench decode --preset tiny --device cpu --threads 1 " +
                                      "--batch 1,4 --prompt-len " + std::to_string(prompt) + " --tokens " +
                                      std::to_string(tokens));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.parse(last_line(r.out));
  const double gbps = double(doc["read_gb_per_s"]), wbytes = double(int64_t(doc["weight_bytes"]));
  REQUIRE(gbps > 0);
  CHECK(double(doc["copy_gb_per_s"]) == 0);  // the CPU measures a read of its weights instead
  // f32 K and V rows of every layer, over the mean keys of the timed steps: prompt + (tokens + 1) / 2.
  const double kv_per_seq =
      (prompt + (tokens + 1) / 2.0) * double(cfg.num_layers) * 2 * double(cfg.kv_dim()) * 4;
  const simdjson::dom::array results = doc["results"];
  REQUIRE(results.size() == 2);
  for (simdjson::dom::element e : results) {
    const double B = double(int64_t(e["batch"]));
    CHECK(double(e["floor_ms_per_step"]) ==
          Approx((wbytes + B * kv_per_seq) / (gbps * 1e9) * 1e3).epsilon(1e-9));
  }
}

TEST_CASE("bench decode --overlap draws the tokens the step-by-step loop draws", "[integration]") {
  // Overlapped, step N + 1's rows take their tokens from step N's draws on the device before the host
  // reads them; the draws (greedy, and seeded at a temperature) must not change.
  for (const std::string draw : {"", " --temperature 0.9 --top-p 0.8"}) {
    // The CPU's default is the engine's there: step by step (as --no-overlap).
    std::vector<std::string> hashes[2];
    for (const char* mode : {"", " --no-overlap", " --overlap"}) {
      const int overlap = std::string_view(mode) == " --overlap" ? 1 : 0;
      const CommandResult r =
          run_command(astrai_bin() + " bench decode --preset tiny --device cpu --threads 1 --batch 1,3 " +
                      "--prompt-len 9 --tokens 7" + draw + mode);
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      simdjson::dom::parser parser;
      const simdjson::dom::element doc = parser.parse(last_line(r.out));
      CHECK(bool(doc["overlap"]) == (overlap == 1));
      for (simdjson::dom::element e : simdjson::dom::array(doc["results"]))
        hashes[overlap].emplace_back(std::string_view(e["tokens_hash"]));
    }
    INFO("draw:" << draw);
    REQUIRE(hashes[0].size() == 4);  // the default's two batches, then --no-overlap's
    REQUIRE(hashes[1].size() == 2);
    CHECK(std::vector<std::string>(hashes[0].begin(), hashes[0].begin() + 2) ==
          std::vector<std::string>(hashes[0].begin() + 2, hashes[0].end()));
    CHECK(std::vector<std::string>(hashes[0].begin(), hashes[0].begin() + 2) == hashes[1]);
  }
  for (const char* other : {" --host-sampling", " --no-overlap"}) {
    const CommandResult bad =
        run_command(astrai_bin() + " bench decode --preset tiny --device cpu --overlap" + other);
    INFO(bad.out << bad.err);
    CHECK(bad.exit_code != 0);
    CHECK_THAT(bad.err, Catch::Contains("--overlap excludes " + std::string(other + 1)));
  }
}

TEST_CASE(
    "bench linear: one JSON line per shape with OpenBLAS's time and each path's (f32 and bf16 weights); "
    "bad shapes refused",
    "[integration]") {
  const CommandResult r = run_command(astrai_bin() + " bench linear --shapes 3x20x17,9x33x64 --repeat 2");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.parse(last_line(r.out));
  CHECK(std::string_view(doc["bench"]) == "linear");
  CHECK(int64_t(doc["M"]) == 9);
  CHECK(int64_t(doc["N"]) == 33);
  CHECK(int64_t(doc["K"]) == 64);
  CHECK(double(doc["openblas_ms"]) > 0);
  CHECK(double(doc["baseline_ms"]) > 0);  // every CPU has the baseline path
  CHECK(double(doc["baseline_bf16_ms"]) > 0);
  for (const char* bad : {"3x20", "0x4x4", "3x4x4x5", "3x4x4,"}) {
    const CommandResult b = run_command(astrai_bin() + " bench linear --shapes " + bad);
    INFO(bad << ": " << b.err);
    CHECK(b.exit_code != 0);
    CHECK_THAT(b.err, Catch::Contains("is not MxNxK"));
  }
}
