// astrai bench structured [--tokenizer DIR] [--model tiny] [--requests N] [--max-tokens N]
// Structured output costs, printed as tables and one JSON line:
//  1. Mask time per token at a tokenizer's vocabulary (the Qwen3 tokenizer: 151,669 tokens): N
//     simulated requests under one JSON schema, each drawing uniformly among the allowed tokens
//     until the value is complete; per token, the mask (Matcher::fill_mask into a row of the
//     sample op's size) plus advancing past the drawn token. "cold" is the first request on a
//     fresh grammar (every state's trie walk and DFA transitions are new), "warm" the others.
//  0. Grammar compile time (no vocabulary): the schema above, a string of maxLength 4096, and two
//     patterns refused at the size budget (grammar.h); then reading a request's response_format with
//     that schema, the first time and again (its compile verdict is remembered).
//  2. Decode tokens/s on --model (tiny: CPU) at batch 1 and 32, without and with a JSON-schema
//     constraint whose one string keeps the model writing until max_tokens (ignore_eos), after a
//     warm-up pass of each; best of --rounds alternating runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/engine/engine.h"
#include "src/engine/loader.h"
#include "src/model/config.h"
#include "src/structured/json_schema.h"
#include "src/structured/response_format.h"
#include "src/structured/token_grammar.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A typical extraction schema: nested object, strings with bounds, enum, integers with bounds,
// an array of objects, an optional field.
constexpr const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "email":{"type":"string","format":"email"},
  "role":{"enum":["admin","editor","viewer"]},
  "address":{"type":"object","properties":{"city":{"type":"string","maxLength":20},
             "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city","zip"],"additionalProperties":false},
  "orders":{"type":"array","maxItems":4,"items":{"type":"object","properties":{
             "sku":{"type":"string","maxLength":12},"qty":{"type":"integer","minimum":1,"maximum":99},
             "price":{"type":"number","minimum":0,"maximum":10000}},"required":["sku","qty","price"],
             "additionalProperties":false}},
  "note":{"type":["string","null"],"maxLength":40}},
  "required":["name","age","email","role","address","orders"],"additionalProperties":false})";

struct StructuredArgs {
  CommonOptions common;
  std::string tokenizer;  // a model directory with tokenizer.json (empty: skip part 1)
  std::string model = "tiny";
  int requests = 50;
  int max_tokens = 128;
  int rounds = 5;
  uint64_t seed = 1;
};

// Best of 3 compiles of `source` (a pattern when regex), ms; `states` and `err` of the last.
double compile_ms(bool regex, const std::string& source, size_t& states, std::string& err) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    structured::Grammar g;
    const auto t0 = Clock::now();
    err = regex ? structured::compile_regex(source, g) : structured::compile_json_schema(source, g);
    best = std::min(best, seconds_since(t0) * 1e3);
    states = g.num_states();
  }
  return best;
}

// Reads `{"type":"json_schema","json_schema":{"schema": kSchema}}` as a request's response_format, ms.
double read_format_ms() {
  const std::string text =
      std::string(R"({"type":"json_schema","json_schema":{"name":"x","schema":)") + kSchema + "}}";
  simdjson::ondemand::parser p;
  simdjson::padded_string padded(text);
  simdjson::ondemand::document doc;
  json::Value v;
  const auto t0 = Clock::now();
  if (p.iterate(padded).get(doc) || doc.get_value().get(v)) return -1;
  ConstraintSpec out;
  bool handled = false;
  if (structured::read_constraint_field("response_format", v, out, handled)) return -1;
  return seconds_since(t0) * 1e3;
}

void compile_times(JsonWriter& w) {
  struct Case {
    const char* name;
    bool regex;
    std::string source;
  };
  const Case cases[] = {{"extraction schema (above)", false, kSchema},
                        {"string, maxLength 4096", false, R"({"type":"string","maxLength":4096})"},
                        {"(a?){4096}: refused", true, "(a?){4096}"},
                        {"(a{4096}){4096}: refused", true, "(a{4096}){4096}"}};
  std::printf("%-34s %12s %10s\n", "grammar compile", "ms", "states");
  w.key("compile").begin_array();
  for (const Case& c : cases) {
    size_t states = 0;
    std::string err;
    const double ms = compile_ms(c.regex, c.source, states, err);
    std::printf("%-34s %12.2f %10zu%s\n", c.name, ms, states, err.empty() ? "" : "  (refused)");
    w.begin_object().key("case").value(c.name).key("ms").value(ms).key("states").value(uint64_t(states));
    w.key("refused").value(!err.empty()).end_object();
  }
  w.end_array();
  const double first = read_format_ms(), again = read_format_ms();
  std::printf("%-34s %12.3f / %.3f\n\n", "read response_format ms, 1st / 2nd", first, again);
  w.key("read_format_first_ms").value(first).key("read_format_again_ms").value(again);
}

struct MaskTimes {
  double vocab_s = 0, compile_s = 0;
  double cold_us = 0, warm_us = 0;
  int64_t cold_tokens = 0, warm_tokens = 0;
  int vocab = 0;
  size_t dfa_states = 0;
  std::vector<double> warm_calls;  // us per fill_mask of the warm requests
};

MaskTimes mask_times(const StructuredArgs& a) {
  MaskTimes m;
  auto tok = Tokenizer::load_or_preset(a.tokenizer, preset_names()).value();
  auto t0 = Clock::now();
  auto vocab = structured::TokenVocabulary::of(*tok);
  m.vocab_s = seconds_since(t0);
  m.vocab = vocab->size();
  t0 = Clock::now();
  auto g = structured::compile_constraint(ConstraintKind::json_schema, kSchema, vocab).value();
  m.compile_s = seconds_since(t0);
  const int64_t words = vocab->mask_words();
  std::vector<uint32_t> row(static_cast<size_t>(words));
  const std::vector<int32_t> stop = tok->special_tokens().stop_ids;
  std::mt19937_64 rng(a.seed);
  std::vector<int32_t> allowed;
  for (int r = 0; r < a.requests; ++r) {
    structured::Matcher matcher(g);
    double spent = 0;
    int64_t n = 0;
    for (int step = 0; step < 4096 && !matcher.complete(); ++step) {
      const auto t = Clock::now();
      matcher.fill_mask(row.data(), words, stop);
      const double dt = seconds_since(t);
      spent += dt;
      if (r > 0) m.warm_calls.push_back(dt * 1e6);
      // The draw (outside the timing: the sample op's work).
      allowed.clear();
      for (int64_t w = 0; w < words; ++w)
        for (uint32_t bits = row[size_t(w)]; bits; bits &= bits - 1)
          allowed.push_back(int32_t(w * 32 + __builtin_ctz(bits)));
      const int32_t pick = allowed[size_t(rng() % allowed.size())];
      if (std::find(stop.begin(), stop.end(), pick) != stop.end()) break;
      const auto t2 = Clock::now();
      matcher.advance(pick);
      spent += seconds_since(t2);
      ++n;
    }
    if (r == 0) {
      m.cold_us = spent * 1e6;
      m.cold_tokens = n;
    } else {
      m.warm_us += spent * 1e6;
      m.warm_tokens += n;
    }
  }
  m.dfa_states = g->dfa_states();
  return m;
}

// Completion tokens/s of `batch` concurrent requests of max_tokens each.
double decode_tps(Engine& engine, const Tokenizer& tok, int batch, int max_tokens, bool constrained,
                  uint64_t seed) {
  std::shared_ptr<structured::TokenGrammar> grammar;
  if (constrained)
    // minLength past max_tokens: the value cannot close early, so both runs make the same number of
    // tokens (the tiny model's tokens are single bytes).
    grammar = structured::compile_constraint(
                  ConstraintKind::json_schema,
                  R"({"type":"object","properties":{"text":{"type":"string","minLength":)" +
                      std::to_string(max_tokens) + R"(}},"required":["text"]})",
                  tok)
                  .value();
  std::vector<Stream> streams;
  const auto t0 = Clock::now();
  for (int i = 0; i < batch; ++i) {
    Request r;
    r.prompt = {1, 2, 3, 4, 5, 6, 7, int32_t(8 + i % 32)};
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed + uint64_t(i);
    if (constrained) r.constraint = {ConstraintKind::json_schema, grammar};
    streams.push_back(engine.submit(std::move(r)).value());
  }
  int64_t tokens = 0;
  for (Stream& s : streams) {
    TokenEvent ev;
    while (s.wait(ev))
      if (ev.token >= 0) ++tokens;
  }
  return double(tokens) / seconds_since(t0);
}

void run(const StructuredArgs& a) {
  apply_common_options(a.common);
  JsonWriter w;
  w.begin_object().key("bench").value("structured");
  compile_times(w);
  if (!a.tokenizer.empty()) {
    const MaskTimes m = mask_times(a);
    const double cold = m.cold_us / double(std::max<int64_t>(1, m.cold_tokens));
    const double warm = m.warm_us / double(std::max<int64_t>(1, m.warm_tokens));
    std::printf("%-34s %12s\n", "mask per token", "");
    std::printf("%-34s %12d\n", "vocabulary", m.vocab);
    std::printf("%-34s %12.3f\n", "vocabulary + trie build s (once)", m.vocab_s);
    std::printf("%-34s %12.4f\n", "schema compile s", m.compile_s);
    std::printf("%-34s %12.1f   (%lld tokens)\n", "cold request us/token", cold, (long long)m.cold_tokens);
    std::printf("%-34s %12.2f   (%lld tokens, %d requests)\n", "warm requests us/token", warm,
                (long long)m.warm_tokens, a.requests - 1);
    std::printf("%-34s %12zu\n", "DFA states", m.dfa_states);
    // A mask computed now (a state no earlier request reached) vs a cached one: the tail.
    std::vector<double> calls = m.warm_calls;
    std::sort(calls.begin(), calls.end());
    const auto pct = [&](double q) {
      return calls.empty() ? 0.0 : calls[size_t(q * double(calls.size() - 1))];
    };
    size_t slow = 0;
    double slow_us = 0;
    for (double c : calls)
      if (c > 100) ++slow, slow_us += c;
    std::printf("%-34s %12.2f / %.2f / %.1f\n", "warm fill_mask us p50 / p90 / p99", pct(0.5), pct(0.9),
                pct(0.99));
    std::printf("%-34s %12zu   (%.1f%% of the warm time)\n", "warm fill_mask calls > 100 us", slow,
                100.0 * slow_us / std::max(1.0, m.warm_us));
    w.key("warm_fill_mask_us_p50").value(pct(0.5)).key("warm_fill_mask_us_p99").value(pct(0.99));
    w.key("warm_slow_calls").value(uint64_t(slow));
    w.key("tokenizer").value(a.tokenizer).key("vocab").value(m.vocab).key("vocab_build_s").value(m.vocab_s);
    w.key("compile_s")
        .value(m.compile_s)
        .key("cold_us_per_token")
        .value(cold)
        .key("cold_tokens")
        .value(m.cold_tokens);
    w.key("warm_us_per_token").value(warm).key("warm_tokens").value(m.warm_tokens);
    w.key("dfa_states").value(uint64_t(m.dfa_states));
  }
  if (!a.model.empty()) {
    EngineOptions eo;
    eo.max_batch_size = 64;
    eo.kv_memory_bytes = int64_t(1) << 30;
    auto le = load_engine(a.model, a.common.device, eo).value();
    std::printf("\n%-10s %14s %14s %10s\n", "batch", "plain tok/s", "schema tok/s", "cost");
    for (int batch : {1, 32}) {
      // Warm-up of both (the constrained one builds its DFA and masks), then rounds alternating
      // the two (the machine's load drifts), best of each.
      decode_tps(*le.engine, *le.tokenizer, batch, a.max_tokens, false, a.seed);
      decode_tps(*le.engine, *le.tokenizer, batch, a.max_tokens, true, a.seed);
      double plain = 0, cons = 0;
      for (int round = 0; round < a.rounds; ++round) {
        const uint64_t seed = a.seed + 1000 * uint64_t(round + 1);
        plain = std::max(plain, decode_tps(*le.engine, *le.tokenizer, batch, a.max_tokens, false, seed));
        cons = std::max(cons, decode_tps(*le.engine, *le.tokenizer, batch, a.max_tokens, true, seed));
      }
      std::printf("%-10d %14.1f %14.1f %9.1f%%\n", batch, plain, cons, 100.0 * (plain - cons) / plain);
      const std::string b = std::to_string(batch);
      w.key("plain_tps_b" + b).value(plain).key("schema_tps_b" + b).value(cons);
    }
    le.engine->shutdown();
    w.key("model").value(a.model).key("max_tokens").value(a.max_tokens);
  }
  w.end_object();
  std::printf("%s\n", w.str().c_str());
  set_exit_code(0);
}

void register_bench_structured(CLI::App& app) {
  auto args = std::make_shared<StructuredArgs>();
  CLI::App* sub =
      bench_command(app)->add_subcommand("structured",
                                         "Structured output: grammar compile ms, mask us/token at a "
                                         "vocabulary, decode tok/s with vs without a schema");
  add_common_options(*sub, args->common);
  sub->add_option(
      "--tokenizer", args->tokenizer,
      "Model directory whose tokenizer.json gives the vocabulary of the mask timing (empty: skip)");
  sub->add_option("--model", args->model, "Model or preset for the decode timing (empty: skip)")
      ->capture_default_str();
  sub->add_option("--requests", args->requests, "Simulated requests of the mask timing")
      ->capture_default_str();
  sub->add_option("--max-tokens", args->max_tokens, "Tokens per request of the decode timing")
      ->capture_default_str();
  sub->add_option("--rounds", args->rounds, "Measured rounds of the decode timing (best of)")
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Seed")->capture_default_str();
  sub->callback([args] { run(*args); });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("bench-structured", register_bench_structured);

}  // namespace astrai::cli
