// `astrai generate` end to end: the binary on a tiny model directory, outputs checked against a
// reference decode by full forwards and the tokenizer.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <random>
#include <sstream>

#include "src/tokenizer/tokenizer.h"
#include "tools/model_dirs.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l))
    if (!l.empty()) v.push_back(l);
  return v;
}

std::string gen_cmd(const std::filesystem::path& dir, const TempDir& t, const std::string& extra) {
  return astrai_bin() + " generate --model '" + dir.string() + "' --input '" + (t / "in.jsonl").string() +
         "' --output '" + (t / "out.jsonl").string() + "' --threads 1 --kv-memory 32MiB " + extra;
}

}  // namespace

TEST_CASE("greedy generate equals the argmax of repeated full forwards, in input order", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir("tiny");
  auto ref = load_model(dir);
  auto tok = Tokenizer::load(dir).value();
  TempDir t("gen");
  std::vector<std::string> prompts;
  std::string in;
  for (int i = 0; i < 12; ++i) {
    std::string p;
    for (int j = 0, n = 3 + int(rng() % 40); j < n; ++j) p += char('a' + rng() % 26);
    prompts.push_back(p);
    in += "{\"id\": \"r" + std::to_string(i) + "\", \"prompt\": \"" + p + "\"}\n";
  }
  write_file(t / "in.jsonl", in);
  auto r =
      run_command(gen_cmd(dir, t, "--temperature 0 --max-tokens 10 --ignore-eos --max-prefill-tokens 16"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = lines_of(read_file(t / "out.jsonl"));
  REQUIRE(out.size() == prompts.size());
  simdjson::dom::parser parser;
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("line " << i << ": " << out[i]);
    auto ids = tok->encode(prompts[i], true);
    auto expect_ids = full_forward_greedy(*ref.model, ids, 10);
    simdjson::dom::element doc = parser.parse(out[i]);
    CHECK(std::string_view(doc["id"]) == "r" + std::to_string(i));
    CHECK(std::string_view(doc["text"]) == tok->decode(expect_ids, true));
    CHECK(std::string_view(doc["finish_reason"]) == "length");
    CHECK(int64_t(doc["usage"]["prompt_tokens"]) == int64_t(ids.size()));
    CHECK(int64_t(doc["usage"]["completion_tokens"]) == 10);
  }
  CHECK(r.err.find("tok/s") != std::string::npos);
}

TEST_CASE("generate echoes ids, reports bad lines and goes on, applies templates, n and stop strings",
          "[integration]") {
  const auto dir = model_dir("tiny");
  auto tok = Tokenizer::load(dir).value();
  auto ref = load_model(dir);
  TempDir t("gen");
  // The greedy continuation of "abc", to pick a stop string that occurs inside it.
  const auto cont = tok->decode(full_forward_greedy(*ref.model, tok->encode("abc", true), 12), true);
  REQUIRE(cont.size() >= 6);
  const std::string stop = cont.substr(3, 2);
  const size_t cut = cont.find(stop);
  std::string in;
  in += "{\"id\": 17, \"prompt\": \"abc\", \"max_tokens\": 12, \"temperature\": 0}\n";  // 1
  in += "{\"prompt\": \"abc\", \"max_tokens\": 12, \"temperature\": 0}\n";              // 2: no id
  in += "not json\n";                                                                   // 3
  in += "{\"id\": {\"k\": [1, 2]}, \"prompt\": 5}\n";                                   // 4
  in += "{\"id\": \"s\", \"prompt\": \"abc\", \"max_tokens\": 12, \"temperature\": 0, \"stop\": [\"" + stop +
        "\"]}\n";                                                                                    // 5
  in += "{\"id\": \"n\", \"prompt\": \"abc\", \"max_tokens\": 12, \"temperature\": 0, \"n\": 3}\n";  // 6
  in +=
      "{\"id\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4}\n";  // 7
  in += "{\"id\": \"big\", \"prompt\": \"abc\", \"max_tokens\": 0}\n";                                    // 8
  write_file(t / "in.jsonl", in);
  auto r = run_command(gen_cmd(dir, t, "--ignore-eos --no-progress"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = lines_of(read_file(t / "out.jsonl"));
  REQUIRE(out.size() == 8);
  simdjson::dom::parser p;
  simdjson::dom::element d;
  d = p.parse(out[0]);
  CHECK(int64_t(d["id"]) == 17);
  CHECK(std::string_view(d["text"]) == cont);
  d = p.parse(out[1]);
  CHECK(int64_t(d["id"]) == 2);  // the line number
  CHECK(std::string_view(d["text"]) == cont);
  d = p.parse(out[2]);
  CHECK(int64_t(d["id"]) == 3);
  CHECK(std::string_view(d["error"]).find("line 3") != std::string_view::npos);
  d = p.parse(out[3]);
  CHECK(simdjson::minify(d["id"]) == "{\"k\":[1,2]}");
  CHECK(std::string_view(d["error"]).find("line 4") != std::string_view::npos);
  d = p.parse(out[4]);
  CHECK(std::string_view(d["text"]) == cont.substr(0, cut));
  CHECK(std::string_view(d["finish_reason"]) == "stop");
  CHECK(int64_t(d["usage"]["completion_tokens"]) < 12);
  d = p.parse(out[5]);
  simdjson::dom::array texts = d["texts"];
  CHECK(texts.size() == 3);
  for (auto x : texts) CHECK(std::string_view(x) == cont);
  CHECK(int64_t(d["usage"]["completion_tokens"]) == 36);
  d = p.parse(out[6]);
  CHECK(std::string_view(d["id"]) == "m");
  // The chat template's prompt: count its tokens independently.
  const std::string rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  CHECK(int64_t(d["usage"]["prompt_tokens"]) == int64_t(tok->encode(rendered, false).size()));
  d = p.parse(out[7]);
  CHECK(std::string_view(d["error"]).find("line 8") != std::string_view::npos);
}

TEST_CASE("generate takes prompt_ids lines and writes the generated token_ids of every choice",
          "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir("tiny");
  auto ref = load_model(dir);
  auto tok = Tokenizer::load(dir).value();
  const int vocab = int(ref.model->config().vocab_size);
  // Random ids, special ones included: no tokenizer in between.
  std::vector<int32_t> ids;
  for (int i = 0, n = 2 + int(rng() % 20); i < n; ++i) ids.push_back(int32_t(rng() % uint64_t(vocab)));
  std::string list;
  for (int32_t t : ids) list += (list.empty() ? "" : ",") + std::to_string(t);
  const auto expect = full_forward_greedy(*ref.model, ids, 8);
  TempDir t("gen");
  std::string in;
  in += "{\"id\": \"a\", \"prompt_ids\": [" + list +
        "], \"max_tokens\": 8, \"temperature\": 0, "
        "\"ignore_eos\": true}\n";
  in += "{\"id\": \"b\", \"prompt_ids\": [" + list +
        "], \"max_tokens\": 8, \"temperature\": 0, \"n\": 2, "
        "\"ignore_eos\": true}\n";
  in += "{\"id\": \"c\", \"prompt_ids\": [], \"max_tokens\": 8}\n";
  in += "{\"id\": \"d\", \"prompt_ids\": [1, 2.5], \"max_tokens\": 8}\n";
  in += "{\"id\": \"e\", \"prompt_ids\": [" + std::to_string(vocab) + "], \"max_tokens\": 8}\n";
  in += "{\"id\": \"f\", \"prompt_ids\": [1], \"prompt\": \"x\", \"max_tokens\": 8}\n";
  in += "{\"id\": \"g\", \"prompt\": \"abc\", \"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true}\n";
  // vLLM's stop_token_ids and min_tokens: the greedy first token as a stop id, then held off.
  const std::string stop_first = "\"stop_token_ids\": [" + std::to_string(expect[0]) + "]";
  in += "{\"id\": \"h\", \"prompt_ids\": [" + list + "], \"max_tokens\": 8, \"temperature\": 0, " +
        stop_first + "}\n";
  in += "{\"id\": \"i\", \"prompt_ids\": [" + list + "], \"max_tokens\": 8, \"temperature\": 0, " +
        stop_first + ", \"min_tokens\": 3, \"ignore_eos\": true}\n";
  in += "{\"id\": \"j\", \"prompt_ids\": [1], \"min_tokens\": -1}\n";
  write_file(t / "in.jsonl", in);
  auto r = run_command(gen_cmd(dir, t, "--no-progress"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = lines_of(read_file(t / "out.jsonl"));
  REQUIRE(out.size() == 10);
  simdjson::dom::parser p;
  auto ids_of = [](simdjson::dom::array a) {
    std::vector<int32_t> v;
    for (auto x : a) v.push_back(int32_t(int64_t(x)));
    return v;
  };
  simdjson::dom::element d = p.parse(out[0]);
  INFO(out[0]);
  CHECK(ids_of(d["token_ids"]) == expect);
  CHECK(std::string_view(d["text"]) == tok->decode(expect, true));
  CHECK(int64_t(d["usage"]["prompt_tokens"]) == int64_t(ids.size()));
  d = p.parse(out[1]);
  simdjson::dom::array per_choice = d["token_ids"];
  REQUIRE(per_choice.size() == 2);
  for (auto c : per_choice) CHECK(ids_of(c) == expect);
  for (int i : {2, 3, 4, 5}) {
    INFO(out[size_t(i)]);
    d = p.parse(out[size_t(i)]);
    CHECK(std::string_view(d["error"]).find("line " + std::to_string(i + 1)) != std::string_view::npos);
  }
  CHECK(std::string(p.parse(out[4])["error"]).find("vocabulary") != std::string::npos);
  d = p.parse(out[6]);
  const auto g = full_forward_greedy(*ref.model, tok->encode("abc", true), 5);
  CHECK(ids_of(d["token_ids"]) == g);
  d = p.parse(out[7]);
  INFO(out[7]);
  CHECK(ids_of(d["token_ids"]).empty());  // a stop id is not output, as the eos is not
  CHECK(std::string_view(d["finish_reason"]) == "stop");
  d = p.parse(out[8]);
  INFO(out[8]);
  const auto held = ids_of(d["token_ids"]);
  CHECK(held.size() >= 3);
  for (int32_t id : held) CHECK(id != expect[0]);
  CHECK(std::string_view(p.parse(out[9])["error"]).find("min_tokens") != std::string_view::npos);
}

TEST_CASE("generate's defaults: a line's fields, then the flags, then the model's generation_config.json",
          "[integration]") {
  // A copy of the tiny model whose generation_config.json sets top_k 1 (greedy) and max_new_tokens 6.
  TempDir t("gen");
  const std::filesystem::path dir = t / "model";
  std::filesystem::copy(model_dir("tiny"), dir, std::filesystem::copy_options::recursive);
  std::string gen = read_file(dir / "generation_config.json");
  gen = gen.substr(0, gen.rfind('}')) + R"(, "top_k": 1, "max_new_tokens": 6})";
  write_file(dir / "generation_config.json", gen);
  auto ref = load_model(dir);
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 42};
  const auto greedy6 = full_forward_greedy(*ref.model, prompt, 6);
  write_file(t / "in.jsonl",
             R"({"id": "a", "prompt_ids": [5, 17, 99, 3, 250, 42], "seed": 1, "ignore_eos": true})"
             "\n"
             R"({"id": "b", "prompt_ids": [5, 17, 99, 3, 250, 42], "seed": 1, "ignore_eos": true,)"
             R"( "top_k": 0, "max_tokens": 6})"
             "\n");
  simdjson::dom::parser p;
  auto run = [&](const std::string& flags) {
    const CommandResult r = run_command(gen_cmd(dir, t, "--no-progress " + flags));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& line : lines_of(read_file(t / "out.jsonl"))) {
      INFO(line);
      std::vector<int32_t> v;
      for (auto x : simdjson::dom::array(p.parse(line)["token_ids"])) v.push_back(int32_t(int64_t(x)));
      ids.push_back(v);
    }
    REQUIRE(ids.size() == 2);
    return std::make_pair(ids, r.out + r.err);  // the log goes to stdout
  };
  // The model's top_k 1 and 6 tokens for line a; line b's own top_k 0 samples.
  const auto [model, log] = run("");
  CHECK(model[0] == greedy6);
  CHECK(model[1] != greedy6);
  CHECK(model[1].size() == 6);
  CHECK(log.find("sampling defaults from generation_config.json: top_k 1, max_tokens 6") !=
        std::string::npos);
  // Flags win over the file: --top-k 0 samples line a as line b's own field does, --max-tokens 4.
  const auto flags = run("--top-k 0 --max-tokens 4").first;
  CHECK(flags[0].size() == 4);
  CHECK(flags[0] == std::vector<int32_t>(model[1].begin(), model[1].begin() + 4));
  // --generation-config none: the built-in defaults (top_k off, 256 tokens).
  const auto none = run("--generation-config none").first;
  CHECK(none[0].size() == 256);
  CHECK(std::vector<int32_t>(none[0].begin(), none[0].begin() + 6) == model[1]);
}

TEST_CASE("generate --resume skips ids already written and appends the rest", "[integration]") {
  const auto dir = model_dir("tiny");
  TempDir t("gen");
  std::string in;
  for (int i = 0; i < 6; ++i)
    in += "{\"id\": " + std::to_string(i) + ", \"prompt\": \"x" + std::to_string(i) + "\"}\n";
  write_file(t / "in.jsonl", in);
  // A previous run wrote ids 0 and 3, then died in the middle of a line.
  write_file(t / "out.jsonl",
             "{\"id\":0,\"text\":\"old\",\"finish_reason\":\"length\"}\n"
             "{\"id\":3,\"text\":\"old\",\"finish_reason\":\"length\"}\n{\"id\":4,\"te");
  auto r = run_command(gen_cmd(dir, t, "--resume --max-tokens 3 --seed 5 --no-progress"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = lines_of(read_file(t / "out.jsonl"));
  REQUIRE(out.size() == 6);
  simdjson::dom::parser p;
  std::vector<int64_t> ids;
  for (auto& l : out) ids.push_back(int64_t(p.parse(l)["id"]));
  CHECK(ids == std::vector<int64_t>{0, 3, 1, 2, 4, 5});
  CHECK(out[0].find("old") != std::string::npos);
}

TEST_CASE("generate fails with one line and a non-zero exit for a missing model or input", "[integration]") {
  TempDir t("gen");
  write_file(t / "in.jsonl", "{\"prompt\": \"a\"}\n");
  auto r = run_command(astrai_bin() + " generate --model /nonexistent/model --input '" +
                       (t / "in.jsonl").string() + "' --output '" + (t / "out.jsonl").string() + "'");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("/nonexistent/model") != std::string::npos);
  r = run_command(astrai_bin() + " generate --model '" + model_dir("tiny").string() + "' --input '" +
                  (t / "missing.jsonl").string() + "' --output '" + (t / "out.jsonl").string() +
                  "' --kv-memory 32MiB");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("missing.jsonl") != std::string::npos);
}

TEST_CASE("generate --chat-template renders messages lines with the given template", "[integration]") {
  const auto dir = model_dir("tiny");
  auto tok = Tokenizer::load(dir).value();
  TempDir t("gen");
  write_file(t / "tmpl.jinja", "<<{{ messages[0]['content'] }}>>");
  write_file(t / "in.jsonl",
             R"({"id": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2})"
             "\n");
  simdjson::dom::parser p;
  for (const std::string& flag : {"--chat-template '" + (t / "tmpl.jinja").string() + "'",
                                  std::string("--chat-template '<<{{ messages[0].content }}>>'")}) {
    INFO(flag);
    auto r = run_command(gen_cmd(dir, t, "--no-progress " + flag));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    simdjson::dom::element d = p.parse(lines_of(read_file(t / "out.jsonl"))[0]);
    CHECK(int64_t(d["usage"]["prompt_tokens"]) == int64_t(tok->encode("<<hello there>>", false).size()));
  }
  auto missing = run_command(gen_cmd(dir, t, "--no-progress --chat-template /nonexistent/t.jinja"));
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("no such file") != std::string::npos);
  auto broken = run_command(gen_cmd(dir, t, "--no-progress --chat-template '{{ x'"));
  CHECK(broken.exit_code == 1);
  CHECK(broken.err.find("--chat-template") != std::string::npos);
}
