// `astrai score` end to end on a random tiny model with the built-in tokenizer: per-token
// logprobs equal log_softmax of one full-sequence forward (in-process) and of the PyTorch
// reference, whether sequences are fed whole or in small prefill chunks packed several per batch;
// bad lines become {"id", "error": "line N: ..."} in place and the run goes on.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "model/forward_util.h"
#include "src/core/json_writer.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// log_softmax(logits[r])[next] in double, for rows 0 .. n-2 of a [n, V] block.
std::vector<double> logprobs_from_logits(const std::vector<double>& logits, const std::vector<int32_t>& ids,
                                         int64_t V) {
  std::vector<double> out;
  for (size_t r = 0; r + 1 < ids.size(); ++r) {
    const double* row = logits.data() + r * size_t(V);
    double m = row[0];
    for (int64_t j = 1; j < V; ++j) m = std::max(m, row[j]);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(row[j] - m);
    out.push_back(row[ids[r + 1]] - m - std::log(s));
  }
  return out;
}

// Full-sequence forward of ids in-process (one prefill over contiguous pages).
std::vector<double> full_forward_logits(Model& model, const std::vector<int32_t>& ids) {
  const int ps = 16;
  KvCache kv = model.allocate_kv(int(ids.size() + ps - 1) / ps, ps);
  SeqPages pages;
  pages.page_size = ps;
  for (int p = 0; p < kv.num_pages; ++p) pages.pages.push_back(p);
  auto f = run_forward(model, make_batch({{&ids, &pages, 0, int64_t(ids.size())}}), kv);
  return std::vector<double>(f.begin(), f.end());
}

std::string random_text(std::mt19937_64& rng, int n) {
  static const std::string alphabet = "abcdefghijklmnopqrstuvwxyz ABCXYZ.,;!?0123456789\u00e9\u4e2d";
  std::string s;
  while (int(s.size()) < n) s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
  return utf8_sanitize(s);  // a cut multi-byte character becomes U+FFFD, still text
}

std::string json_string(const std::string& s) {
  std::string out;
  json_escape(out, s);
  return out;
}

struct Expect {
  std::string id_json;
  std::vector<int32_t> ids;  // empty: an error line
};

}  // namespace

TEST_CASE(
    "score gives the logprobs of a full forward, whole or in prefill chunks, and reports bad lines in place",
    "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("score");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, seed, DType::f32, nullptr, /*with_tokenizer=*/true);
  auto tok = Tokenizer::load(dir.path()).value();
  auto backend = make_backend(BackendOptions{}).value();
  auto model = Model::load(dir.path(), *backend).value();

  std::string input;
  std::vector<Expect> expect;
  auto text_line = [&](const std::string& id_json, const std::string& text) {
    input += "{" + (id_json.empty() ? std::string() : "\"id\":" + id_json + ",") +
             "\"text\":" + json_string(text) + "}\n";
    auto ids = tok->encode(text, true);
    expect.push_back({id_json.empty() ? std::to_string(expect.size() + 1) : id_json,
                      ids.size() >= 2 ? ids : std::vector<int32_t>{}});
  };
  const std::string long_text = random_text(rng, std::uniform_int_distribution<int>(300, 500)(rng));
  text_line("\"long\"", long_text);
  text_line("", random_text(rng, std::uniform_int_distribution<int>(5, 60)(rng)));
  const auto direct = random_ids(rng, std::uniform_int_distribution<int64_t>(2, 90)(rng), cfg.vocab_size);
  input += "{\"id\":7,\"ids\":" + ids_json(direct) + "}\n";
  expect.push_back({"7", direct});
  input += "{\"text\": \n";  // not JSON
  expect.push_back({"4", {}});
  text_line("{\"k\":[1,2]}", "x");                                    // one token: nothing to score
  input += "{\"ids\":[1," + std::to_string(cfg.vocab_size) + "]}\n";  // outside the vocabulary
  expect.push_back({"6", {}});
  input += "{\"id\":\"ctx\",\"ids\":" +
           ids_json(random_ids(rng, cfg.max_position_embeddings + 1, cfg.vocab_size)) + "}\n";
  expect.push_back({"\"ctx\"", {}});
  text_line("\"z\"", random_text(rng, std::uniform_int_distribution<int>(100, 200)(rng)));
  write_file(dir / "in.jsonl", input);

  // The independent reference for the longest line.
  const std::vector<double> torch_lp =
      logprobs_from_logits(reference_logits(dir.path(), expect[0].ids), expect[0].ids, cfg.vocab_size);

  for (const std::string flags : {"", "--chunk 7 --batch-tokens 40 --max-seqs 3"}) {
    INFO("flags: " << flags);
    auto r = run_command(astrai_bin() + " score --model '" + dir.path().string() + "' --input '" +
                         (dir / "in.jsonl").string() + "' --output '" + (dir / "out.jsonl").string() + "' " +
                         flags);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 1);  // some lines failed
    simdjson::dom::parser parser;
    std::vector<std::string> lines;
    {
      std::istringstream ss(read_file(dir / "out.jsonl"));
      for (std::string l; std::getline(ss, l);) lines.push_back(l);
    }
    REQUIRE(lines.size() == expect.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      INFO("output line " << i + 1 << ": " << lines[i].substr(0, 300));
      simdjson::dom::element doc = parser.parse(lines[i]);
      REQUIRE(std::string(simdjson::minify(doc["id"])) == expect[i].id_json);
      if (expect[i].ids.empty()) {
        std::string_view err;
        REQUIRE(doc["error"].get_string().get(err) == simdjson::SUCCESS);
        REQUIRE(err.substr(0, 5 + std::to_string(i + 1).size()) == "line " + std::to_string(i + 1));
        continue;
      }
      std::vector<int32_t> tokens;
      for (simdjson::dom::element e : doc["tokens"].get_array()) tokens.push_back(int32_t(int64_t(e)));
      REQUIRE(tokens == expect[i].ids);
      std::vector<double> lp;
      for (simdjson::dom::element e : doc["logprobs"].get_array()) lp.push_back(double(e));
      const auto want = logprobs_from_logits(full_forward_logits(*model, tokens), tokens, cfg.vocab_size);
      REQUIRE(lp.size() == want.size());
      double sum = 0;
      for (size_t j = 0; j < lp.size(); ++j) {
        INFO("token " << j + 1);
        REQUIRE(std::abs(lp[j] - want[j]) <= 1e-4);
        if (i == 0) REQUIRE(std::abs(lp[j] - torch_lp[j]) <= 1e-4);
        sum += lp[j];
      }
      const double nll = -sum / double(lp.size());
      REQUIRE(std::abs(double(doc["nll"]) - nll) <= 1e-6 * std::abs(nll) + 1e-6);
      REQUIRE(std::abs(double(doc["ppl"]) - std::exp(nll)) <= 1e-5 * std::exp(nll));
    }
  }
}

TEST_CASE("score exits 0 when every line scores and fails cleanly on a missing input file", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("score");
  write_random_model(dir.path(), preset_config("tiny").value(), seed, DType::f32, nullptr, true);
  write_file(dir / "in.jsonl", "{\"text\":\"hello world\"}\n\n{\"ids\":[1,2,3]}\n");
  const std::string base = astrai_bin() + " score --model '" + dir.path().string() + "' --output '" +
                           (dir / "out.jsonl").string() + "' --input ";
  auto ok = run_command(base + "'" + (dir / "in.jsonl").string() + "'");
  INFO("stderr: " << ok.err);
  REQUIRE(ok.exit_code == 0);
  REQUIRE(std::count(ok.err.begin(), ok.err.end(), '\n') == 0);  // no progress bar when not a TTY
  const std::string out = read_file(dir / "out.jsonl");
  REQUIRE(std::count(out.begin(), out.end(), '\n') == 2);  // the blank line is skipped
  auto missing = run_command(base + "'" + (dir / "nope.jsonl").string() + "'");
  REQUIRE(missing.exit_code != 0);
  REQUIRE_THAT(missing.err, Catch::Contains("nope.jsonl"));
}

TEST_CASE("score: error lines before any scored line are reported once and the run finishes",
          "[integration]") {
  // Issue 12: error lines at the front were written (and their slots reset) before admission reached
  // them; admission then took them for unscored lines and died in vector::reserve.
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("score");
  write_random_model(dir.path(), preset_config("tiny").value(), seed, DType::f32, nullptr, true);
  write_file(dir / "in.jsonl", "{\"ids\":[5]}\n{\"text\":\"\"}\n{\"text\":\"hello world\"}\n");
  auto r = run_command(astrai_bin() + " score --model '" + dir.path().string() + "' --input '" +
                       (dir / "in.jsonl").string() + "' --output '" + (dir / "out.jsonl").string() + "'");
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 1);  // some lines failed
  REQUIRE(r.err.empty());     // and nothing internal reached the user
  const std::string out = read_file(dir / "out.jsonl");
  REQUIRE(std::count(out.begin(), out.end(), '\n') == 3);
  REQUIRE_THAT(out, Catch::Contains("\"line 1: needs at least 2 tokens to score, got 1\""));
  REQUIRE_THAT(out, Catch::Contains("\"line 2: needs at least 2 tokens to score, got 0\""));
  REQUIRE_THAT(out, Catch::Contains("{\"id\":3,\"tokens\":["));
  REQUIRE_THAT(out, Catch::Contains("\"logprobs\":["));
}

}  // namespace astrai::test
