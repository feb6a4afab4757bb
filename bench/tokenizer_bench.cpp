// astrai bench tokenize --model DIR --input FILE [--repeat N]
// Encode throughput on one thread: every line of FILE is encoded as its own text (as a batch of
// prompts would be); the best of N passes is reported as MB/s of input and tokens/s, as a table
// and one JSON line. The first pass also warms the per-thread word cache, as a server would be.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/model/config.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

struct BenchTokenizeArgs {
  std::string model;
  std::string input;
  int repeat = 3;
};

void run(const BenchTokenizeArgs& a) {
  const auto t_load = std::chrono::steady_clock::now();
  auto tok = Tokenizer::load_or_preset(a.model, preset_names()).value();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::ifstream f(a.input, std::ios::binary);
  if (!f) throw Error(not_found(a.input + ": cannot open"));
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string l; std::getline(f, l);) {
    bytes += l.size();
    lines.push_back(std::move(l));
  }
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < std::max(1, a.repeat); ++r) {
    size_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& l : lines) n += tok->encode(l, false).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    tokens = n;
  }
  const double mb_s = double(bytes) / 1e6 / best, tok_s = double(tokens) / best;
  std::printf("%-12s %12s %10s %12s %14s %10s\n", "lines", "bytes", "tokens", "MB/s", "tokens/s", "load_s");
  std::printf("%-12zu %12zu %10zu %12.2f %14.0f %10.2f\n", lines.size(), bytes, tokens, mb_s, tok_s, load_s);
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("tokenize")
      .key("model")
      .value(a.model)
      .key("lines")
      .value(uint64_t(lines.size()));
  w.key("bytes").value(uint64_t(bytes)).key("tokens").value(uint64_t(tokens)).key("seconds").value(best);
  w.key("mb_per_s").value(mb_s).key("tokens_per_s").value(tok_s).key("load_s").value(load_s).end_object();
  std::printf("%s\n", w.str().c_str());
}

void register_bench_tokenize(CLI::App& app) {
  auto args = std::make_shared<BenchTokenizeArgs>();
  CLI::App* sub =
      bench_command(app)->add_subcommand("tokenize", "Tokenizer encode throughput (MB/s, tokens/s)");
  sub->add_option("--model", args->model, "Model directory with tokenizer.json, or a preset name")
      ->required();
  sub->add_option("--input", args->input, "Text file; each line is encoded as one text")->required();
  sub->add_option("--repeat", args->repeat, "Passes over the file; the best is reported")
      ->capture_default_str();
  sub->callback([args] {
    run(*args);
    set_exit_code(0);
  });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("bench-tokenize", register_bench_tokenize);

}  // namespace astrai::cli
