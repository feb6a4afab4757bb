// astrai train --config train.yaml [--KEY VALUE ...] [--resume]
// astrai train plot RUN_DIR [-o loss.svg]
// Pretraining ({"text"} JSONL) and SFT ({"messages"} JSONL) of a model directory or a preset; every
// train.yaml key is also a flag (--steps 20, --data.train f.jsonl), and a flag wins over the file.
// SIGTERM / SIGINT: the current step finishes, a checkpoint is written, exit 0 (a second signal
// kills at once).
// Several hosts: astrai train ... --gpus G --nnodes M --node-rank R --master-addr HOST [--master-port P]
// on every host (torchrun's names; src/dist/bootstrap.h); a stop request on any node stops them all
// after the same step, and node 0 writes the checkpoint.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "src/cli/commands.h"
#include "src/core/threads.h"
#include "train/plot.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace astrai::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);  // a second signal ends the process the usual way
}

struct TrainArgs {
  std::string config_file;
  std::map<std::string, std::string> values;  // config key -> flag value
  bool resume = false, no_progress = false;
  int64_t stop_after = 0;
  int threads = 0;
  std::string log_level = "info";
};

void run(CLI::App& sub, TrainArgs& a) {
  CommonOptions common;
  common.threads = a.threads;
  common.log_level = a.log_level;
  apply_common_options(common);
  std::string yaml;
  if (!a.config_file.empty()) {
    std::ifstream f(a.config_file, std::ios::binary);
    if (!f) throw Error(not_found("--config " + a.config_file + ": cannot open"));
    std::stringstream ss;
    ss << f.rdbuf();
    yaml = ss.str();
  }
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const auto& k : train::config_keys()) {
    const std::string name(k.name);
    if (sub.get_option("--" + name)->count() > 0) overrides.emplace_back(name, a.values[name]);
  }
  train::TrainRunOptions o;
  o.config =
      train::parse_train_config(yaml, a.config_file.empty() ? "train config" : a.config_file, overrides)
          .value();
  o.resume = a.resume;
  o.progress = !a.no_progress;
  o.stop_after = a.stop_after;
  o.stop_requested = &g_stop;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  const train::TrainSummary s = train::run_training(o).value();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  std::fprintf(stderr, "train: steps %lld -> %lld%s in %.1f s, loss %.4f",
               static_cast<long long>(s.first_step), static_cast<long long>(s.last_step),
               s.stopped ? " (stopped)" : "", s.seconds, s.last_loss);
  if (s.last_val_loss) std::fprintf(stderr, ", val_loss %.4f", *s.last_val_loss);
  if (!s.checkpoint.empty()) std::fprintf(stderr, ", checkpoint %s", s.checkpoint.c_str());
  std::fprintf(stderr, "\n");
  set_exit_code(0);
}

struct PlotArgs {
  std::string run, output, title, reference_label = "reference";
  std::optional<double> reference;
};

void plot(const PlotArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = fs::is_directory(a.run, ec);
  const fs::path metrics = is_dir ? fs::path(a.run) / "metrics.jsonl" : fs::path(a.run);
  const fs::path run_dir = is_dir ? fs::path(a.run) : metrics.parent_path();
  if (a.reference && !std::isfinite(*a.reference))
    throw Error(invalid_argument("--reference: not a finite loss"));
  const std::vector<train::MetricsPoint> points = train::read_metrics(metrics).value();
  train::PlotOptions o;
  o.title = a.title.empty() ? fs::absolute(run_dir).lexically_normal().filename().string() : a.title;
  o.reference = a.reference;
  o.reference_label = a.reference_label;
  const fs::path out = a.output.empty() ? run_dir / "loss.svg" : fs::path(a.output);
  {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << train::loss_curve_svg(points, o);
    if (!f) throw Error(io_error("-o " + out.string() + ": cannot write"));
  }
  std::fprintf(stderr, "train plot: %zu steps -> %s\n", points.size(), out.c_str());
  set_exit_code(0);
}

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a model (pretraining or SFT) from train.yaml; every key is also a flag, e.g. --steps 20");
  sub->add_option("--config", a->config_file,
                  "train.yaml (optional when flags give model/preset and data.train)")
      ->check(CLI::ExistingFile);
  for (const auto& k : train::config_keys()) {
    const std::string name(k.name);
    std::string flags = "--" + name;
    // The keys torchrun also has take its dashed spelling too (--node-rank as well as --node_rank).
    if (name == "node_rank" || name == "master_addr" || name == "master_port" || name == "node_timeout") {
      std::string dashed = name;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      flags += ",--" + dashed;
    }
    sub->add_option(flags, a->values[name], std::string(k.help))->type_name(std::string(k.type));
  }
  sub->add_flag("--resume", a->resume, "Continue from the newest complete checkpoint under out");
  sub->add_option("--stop-after", a->stop_after,
                  "Stop after this many steps of this run, as SIGTERM would (checkpoint, exit 0)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--no-progress", a->no_progress, "No progress bar on stderr");
  sub->add_option("--threads", a->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_option("--log-level", a->log_level, "trace | debug | info | warn | error | off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  auto p = std::make_shared<PlotArgs>();
  CLI::App* plot_cmd = sub->add_subcommand(
      "plot", "Draw a run's loss curve (train and val loss vs step, from metrics.jsonl) as an SVG");
  plot_cmd->add_option("run", p->run, "The run's out directory, or its metrics.jsonl")->required();
  plot_cmd->add_option("-o,--output", p->output, "SVG file to write (default: RUN_DIR/loss.svg)");
  plot_cmd->add_option("--title", p->title, "Title above the plot (default: the run directory's name)");
  plot_cmd->add_option("--reference", p->reference,
                       "Draw a dashed horizontal line at this loss, e.g. a baseline's");
  plot_cmd->add_option("--reference-label", p->reference_label, "The reference line's legend entry")
      ->capture_default_str();
  plot_cmd->callback([p] { plot(*p); });
  // CLI11 runs a parent's callback after its subcommand's: `train plot` must not start training.
  sub->callback([a, sub, plot_cmd] {
    if (plot_cmd->parsed()) return;
    run(*sub, *a);
  });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("train", register_train);

}  // namespace astrai::cli
