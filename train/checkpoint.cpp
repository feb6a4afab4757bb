#include "train/checkpoint.h"

#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "src/core/json_writer.h"

namespace astrai::train {
namespace fs = std::filesystem;
namespace {

Status write_text(const fs::path& file, const std::string& text) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("cannot write " + file.string());
  f << text;
  f.flush();
  if (!f) return io_error("cannot write " + file.string());
  return {};
}

std::string state_json(const TrainerState& s) {
  JsonWriter w;
  w.begin_object();
  w.key("step").value(s.step);
  w.key("data_cursor")
      .begin_object()
      .key("epoch")
      .value(s.cursor.epoch)
      .key("index")
      .value(s.cursor.index)
      .end_object();
  w.key("rng").begin_object().key("seed").value(s.seed).end_object();
  w.key("optimizer").begin_object().key("type").value("adamw").key("t").value(s.adam_t);
  w.key("beta1").value(s.beta1).key("beta2").value(s.beta2).key("eps").value(s.eps).end_object();
  w.key("config").raw(s.config_json);
  w.end_object();
  return w.take() + "\n";
}

// Step number of a complete checkpoint directory name, or -1.
int64_t step_of(const fs::path& dir) {
  static const std::regex re("step_([0-9]{6,})");
  std::smatch m;
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, m, re)) return -1;
  return std::stoll(m[1].str());
}

}  // namespace

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "generation_config.json",
                                                 "chat_template.jinja"};
  return names;
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

Result<fs::path> write_checkpoint(const fs::path& out, const CheckpointContents& c) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return io_error("cannot create " + out.string() + ": " + ec.message());
  const std::string name = checkpoint_name(c.state.step);
  const fs::path final_dir = out / name;
  const fs::path tmp = out / ("." + name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return io_error("cannot create " + tmp.string() + ": " + ec.message());
  auto fail = [&](Status s) -> Status {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return s;
  };
  ModelConfig config = c.config;
  config.torch_dtype = "float32";
  if (Status s = write_text(tmp / "config.json", config.to_json()); !s.ok()) return fail(s);
  if (Status s = write_safetensors(tmp / "model.safetensors", c.weights, {{"format", "pt"}}); !s.ok())
    return fail(s);
  for (const std::string& f : tokenizer_file_names()) {
    if (!fs::exists(c.tokenizer_dir / f, ec)) continue;
    fs::copy_file(c.tokenizer_dir / f, tmp / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return fail(io_error("cannot copy " + (c.tokenizer_dir / f).string() + ": " + ec.message()));
  }
  if (Status s = write_safetensors(tmp / "optimizer.safetensors", c.moments); !s.ok()) return fail(s);
  // trainer_state.json last: its presence inside a step_ directory marks a complete checkpoint.
  if (Status s = write_text(tmp / "trainer_state.json", state_json(c.state)); !s.ok()) return fail(s);
  if (fs::exists(final_dir, ec)) {
    const fs::path old = out / ("." + name + ".old-" + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return fail(io_error("cannot replace " + final_dir.string() + ": " + ec.message()));
    fs::rename(tmp, final_dir, ec);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir, ec);
  }
  if (ec)
    return fail(
        io_error("cannot rename " + tmp.string() + " to " + final_dir.string() + ": " + ec.message()));
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& out) {
  std::error_code ec;
  std::optional<fs::path> best;
  int64_t best_step = -1;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = step_of(it->path());
    if (step < 0 || !fs::exists(it->path() / "trainer_state.json")) continue;
    if (step > best_step) {
      best_step = step;
      best = it->path();
    }
  }
  return best;
}

Result<TrainerState> read_trainer_state(const fs::path& dir) {
  const fs::path file = dir / "trainer_state.json";
  std::ifstream f(file, std::ios::binary);
  if (!f) return not_found(file.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  simdjson::dom::parser parser;
  simdjson::dom::element doc, config;
  const std::string bad = file.string() + ": malformed trainer state";
  if (parser.parse(simdjson::padded_string(ss.str())).get(doc)) return corrupt(bad + " (not JSON)");
  TrainerState s;
  int64_t epoch = 0;
  if (doc["step"].get(s.step) || doc["data_cursor"]["epoch"].get(epoch) ||
      doc["data_cursor"]["index"].get(s.cursor.index) || doc["rng"]["seed"].get(s.seed) ||
      doc["optimizer"]["t"].get(s.adam_t) || doc["optimizer"]["beta1"].get(s.beta1) ||
      doc["optimizer"]["beta2"].get(s.beta2) || doc["optimizer"]["eps"].get(s.eps) ||
      doc["config"].get(config))
    return corrupt(bad);
  if (s.step < 0 || epoch < 0 || s.cursor.index < 0 || s.adam_t < 0)
    return corrupt(bad + " (negative count)");
  s.cursor.epoch = uint64_t(epoch);
  s.config_json = simdjson::minify(config);
  return s;
}

}  // namespace astrai::train
