#include "src/engine/offline.h"

#include <simdjson.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <unordered_set>

#include "src/core/json_writer.h"
#include "src/engine/stop_strings.h"
#include "src/tokenizer/chat_template.h"

namespace astrai {
namespace {

using Clock = std::chrono::steady_clock;

struct Choice {
  std::unique_ptr<IncrementalDetokenizer> detok;
  StopMatcher stop;
  std::string text;
  int tokens = 0;
  bool done = false;
  FinishReason finish = FinishReason::none;
};

struct Job {
  int line_no = 0;
  std::string id_json;
  std::string error;  // set: the output is an error line
  Request req;
  std::vector<std::string> stops;
  Stream stream;
  std::vector<Choice> choices;
  bool cancel_sent = false;
};

std::string error_line(const Job& j) {
  JsonWriter w;
  w.begin_object().key("id").raw(j.id_json).key("error").value(j.error).end_object();
  return w.take();
}

std::string result_line(const Job& j) {
  JsonWriter w;
  w.begin_object().key("id").raw(j.id_json);
  bool any_length = false;
  int completion = 0;
  for (const auto& c : j.choices) {
    any_length |= c.finish == FinishReason::length;
    completion += c.tokens;
  }
  if (j.choices.size() == 1) {
    w.key("text").value(j.choices[0].text);
  } else {
    w.key("texts").begin_array();
    for (const auto& c : j.choices) w.value(c.text);
    w.end_array();
  }
  w.key("finish_reason").value(any_length ? "length" : "stop");
  if (j.choices.size() > 1) {
    w.key("finish_reasons").begin_array();
    for (const auto& c : j.choices) w.value(finish_reason_name(c.finish));
    w.end_array();
  }
  w.key("usage").begin_object();
  w.key("prompt_tokens")
      .value(int64_t(j.req.prompt.size()))
      .key("completion_tokens")
      .value(int64_t(completion));
  w.end_object().end_object();
  return w.take();
}

// Reads a number field; false with `err` set when present but not a number.
bool get_number(simdjson::dom::element v, const char* name, double& out, std::string& err) {
  if (!v.is_number()) {
    err = std::string("'") + name + "' must be a number";
    return false;
  }
  if (v.is_double()) {
    out = double(v);
  } else if (v.is_int64()) {
    out = double(int64_t(v));
  } else {
    out = double(uint64_t(v));
  }
  return true;
}

bool get_int(simdjson::dom::element v, const char* name, int64_t lo, int64_t hi, int64_t& out,
             std::string& err) {
  if (!v.is_int64()) {
    err = std::string("'") + name + "' must be an integer";
    return false;
  }
  out = int64_t(v);
  if (out < lo || out > hi) {
    err = std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  return true;
}

// Fills job.req / job.stops from one parsed line; returns an error message ("" when fine).
std::string build_job(simdjson::dom::object obj, const Tokenizer& tok, const OfflineOptions& o, Job& job) {
  Request& r = job.req;
  r.max_tokens = o.max_tokens;
  r.sampling = o.sampling;
  r.stop_ids = o.stop_ids;
  r.ignore_eos = o.ignore_eos;
  std::string err;
  bool have_prompt = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    simdjson::dom::element v = field.value;
    if (key == "id") continue;
    if (key == "prompt") {
      std::string_view s;
      if (v.get_string().get(s)) return "'prompt' must be a string";
      r.prompt = tok.encode(s, true);
      have_prompt = true;
    } else if (key == "messages") {
      if (!v.is_array()) return "'messages' must be an array of messages";
      const ChatTemplate* tmpl = tok.chat_template();
      if (!tmpl) {
        Status why = tok.chat_template_status();
        return "'messages' needs the model's chat template, but " +
               (why.ok() ? std::string("the model has none (tokenizer_config.json chat_template)")
                         : why.message());
      }
      ChatTemplateInput in;
      in.messages_json = simdjson::minify(v);
      in.add_generation_prompt = true;
      in.bos_token = tok.special_tokens().bos_token;
      in.eos_token = tok.special_tokens().eos_token;
      auto text = tmpl->render(in);
      if (!text.ok()) return "chat template: " + text.status().message();
      r.prompt = tok.encode(text.value(), false);
      have_prompt = true;
    } else if (key == "max_tokens") {
      int64_t x;
      if (!get_int(v, "max_tokens", 1, 1 << 24, x, err)) return err;
      r.max_tokens = int(x);
    } else if (key == "temperature" || key == "top_p" || key == "min_p") {
      double x;
      if (!get_number(v, std::string(key).c_str(), x, err)) return err;
      (key == "temperature" ? r.sampling.temperature
       : key == "top_p"     ? r.sampling.top_p
                            : r.sampling.min_p) = float(x);
    } else if (key == "top_k") {
      int64_t x;
      if (!get_int(v, "top_k", -1, 1 << 30, x, err)) return err;
      r.sampling.top_k = x < 0 ? 0 : int(x);
    } else if (key == "seed") {
      if (v.is_uint64()) {
        r.sampling.seed = uint64_t(v);
      } else if (v.is_int64() && int64_t(v) >= 0) {
        r.sampling.seed = uint64_t(int64_t(v));
      } else {
        return "'seed' must be a non-negative integer";
      }
    } else if (key == "n") {
      int64_t x;
      if (!get_int(v, "n", 1, 128, x, err)) return err;
      r.n = int(x);
    } else if (key == "stop") {
      std::string_view s;
      if (!v.get_string().get(s)) {
        job.stops.emplace_back(s);
      } else if (v.is_array()) {
        for (auto e : simdjson::dom::array(v)) {
          if (e.get_string().get(s)) return "'stop' must be a string or a list of strings";
          job.stops.emplace_back(s);
        }
      } else if (!v.is_null()) {
        return "'stop' must be a string or a list of strings";
      }
    }
  }
  if (!have_prompt) return "needs \"prompt\" (a string) or \"messages\" (a list)";
  for (auto it = job.stops.begin(); it != job.stops.end();)
    it = it->empty() ? job.stops.erase(it) : std::next(it);
  return {};
}

// Ids already written by an earlier run; truncates a last line cut short by a crash.
Result<std::unordered_set<std::string>> existing_ids(const std::filesystem::path& output) {
  std::unordered_set<std::string> ids;
  std::error_code ec;
  if (!std::filesystem::exists(output, ec)) return ids;
  std::ifstream f(output, std::ios::binary);
  if (!f) return io_error(output.string() + ": cannot read for --resume");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (keep != text.size()) {
    std::filesystem::resize_file(output, keep, ec);
    if (ec) return io_error(output.string() + ": cannot truncate a partial last line: " + ec.message());
    text.resize(keep);
  }
  simdjson::dom::parser parser;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    simdjson::dom::element doc, id;
    if (!parser.parse(text.data() + start, end - start).get(doc) && !doc["id"].get(id))
      ids.insert(simdjson::minify(id));
    start = end + 1;
  }
  return ids;
}

// Appends newly detokenized text through the choice's stop-string matcher; a match ends the choice.
void append_text(Choice& c, std::string_view piece) {
  c.text += c.stop.push(piece);
  if (c.stop.matched()) {
    c.done = true;
    c.finish = FinishReason::stop;
  }
}

class Progress {
 public:
  Progress(bool on, int total) : on_(on), tty_(::isatty(2)), total_(total), start_(Clock::now()) {}
  void update(int done, uint64_t tokens, bool final = false) {
    if (!on_) return;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!final && since < (tty_ ? 0.2 : 10.0)) return;
    last_ = now;
    const double el = std::chrono::duration<double>(now - start_).count();
    const double tps = el > 0 ? double(tokens) / el : 0;
    const double eta = done > 0 ? el / done * (total_ - done) : 0;
    std::fprintf(stderr, "%s[%d/%d] %.1f tok/s, ETA %dm%02ds%s", tty_ ? "\r" : "", done, total_, tps,
                 int(eta) / 60, int(eta) % 60, tty_ && !final ? "   " : "\n");
    std::fflush(stderr);
  }

 private:
  bool on_, tty_;
  int total_;
  Clock::time_point start_, last_{};
};

}  // namespace

Result<OfflineSummary> run_offline_generate(Engine& engine, const Tokenizer& tok,
                                            const std::filesystem::path& input,
                                            const std::filesystem::path& output, const OfflineOptions& o) {
  const auto t0 = Clock::now();
  std::ifstream in(input, std::ios::binary);
  if (!in) return not_found(input.string() + ": cannot open the input file");
  std::unordered_set<std::string> done_ids;
  if (o.resume) {
    ASTRAI_ASSIGN_OR_RETURN(done_ids, existing_ids(output));
  }
  OfflineSummary sum;

  // Parse every line up front: errors become output lines in place.
  std::vector<std::unique_ptr<Job>> jobs;
  simdjson::dom::parser parser;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++sum.lines;
    auto job = std::make_unique<Job>();
    job->line_no = line_no;
    job->id_json = std::to_string(line_no);
    simdjson::dom::element doc;
    simdjson::dom::object obj;
    if (auto e = parser.parse(line).get(doc)) {
      job->error = "line " + std::to_string(line_no) + ": invalid JSON (" + simdjson::error_message(e) + ")";
    } else if (doc.get_object().get(obj)) {
      job->error = "line " + std::to_string(line_no) + ": expected a JSON object";
    } else {
      simdjson::dom::element id;
      if (!obj["id"].get(id)) job->id_json = simdjson::minify(id);
      if (done_ids.count(job->id_json)) {
        ++sum.skipped;
        continue;
      }
      const std::string err = build_job(obj, tok, o, *job);
      if (!err.empty()) job->error = "line " + std::to_string(line_no) + ": " + err;
    }
    jobs.push_back(std::move(job));
  }

  std::FILE* out = std::fopen(output.c_str(), o.resume ? "ab" : "wb");
  if (!out) return io_error(output.string() + ": cannot open for writing");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out_guard(out, &std::fclose);

  // The engine wakes us through the requests' notify hook.
  auto wake = std::make_shared<std::atomic<uint32_t>>(0);
  std::vector<std::string> results(jobs.size());
  std::vector<bool> ready(jobs.size(), false);
  size_t next_write = 0, next_submit = 0;
  std::vector<size_t> active;
  Progress bar(o.progress, int(jobs.size()));
  int finished = 0;

  auto finish_job = [&](size_t i) {
    Job& j = *jobs[i];
    if (!j.error.empty()) {
      results[i] = error_line(j);
      ++sum.errors;
    } else {
      results[i] = result_line(j);
      ++sum.completed;
      sum.prompt_tokens += j.req.prompt.size();
      for (const auto& c : j.choices) sum.completion_tokens += uint64_t(c.tokens);
    }
    ready[i] = true;
    ++finished;
  };

  while (next_write < jobs.size()) {
    // Submit what the engine's queue takes.
    while (next_submit < jobs.size()) {
      Job& j = *jobs[next_submit];
      if (!j.error.empty()) {
        finish_job(next_submit++);
        continue;
      }
      Request r = j.req;
      r.notify = [wake] {
        wake->fetch_add(1, std::memory_order_release);
        wake->notify_one();
      };
      auto s = engine.submit(std::move(r));
      if (!s.ok() && s.status().code() == ErrorCode::resource_exhausted && !active.empty()) break;
      if (!s.ok()) {
        j.error = "line " + std::to_string(j.line_no) + ": " + s.status().message();
        finish_job(next_submit++);
        continue;
      }
      j.stream = s.value();
      j.choices.resize(size_t(j.req.n));
      for (auto& c : j.choices) {
        c.detok = std::make_unique<IncrementalDetokenizer>(tok, true);
        c.stop = StopMatcher(j.stops);
      }
      active.push_back(next_submit++);
    }

    const uint32_t seen = wake->load(std::memory_order_acquire);
    bool any = false;
    for (size_t k = 0; k < active.size();) {
      Job& j = *jobs[active[k]];
      TokenEvent ev;
      while (j.stream.poll(ev)) {
        any = true;
        if (ev.choice < 0 || ev.choice >= int(j.choices.size())) continue;
        Choice& c = j.choices[size_t(ev.choice)];
        if (c.done) continue;
        if (ev.token >= 0) {
          ++c.tokens;
          append_text(c, c.detok->push(ev.token));
        }
        if (!c.done && ev.finish != FinishReason::none) {
          append_text(c, c.detok->finish());
          if (!c.stop.matched()) {
            c.text += c.stop.finish();
            c.finish = ev.finish == FinishReason::length ? FinishReason::length : FinishReason::stop;
          }
          c.done = true;
          if (ev.finish == FinishReason::error || ev.finish == FinishReason::cancelled)
            j.error =
                "line " + std::to_string(j.line_no) + ": " +
                (ev.error.empty() ? std::string("generation ") + finish_reason_name(ev.finish) : ev.error);
        }
      }
      bool all_done = true;
      for (const auto& c : j.choices) all_done &= c.done;
      if (all_done && !j.stream.done() && !j.cancel_sent) {
        engine.cancel(j.stream.id());  // stop strings ended every choice: stop computing
        j.cancel_sent = true;
      }
      if (j.stream.done()) {
        finish_job(active[k]);
        active[k] = active.back();
        active.pop_back();
      } else {
        ++k;
      }
    }

    // Write the finished prefix, in input order.
    bool wrote = false;
    while (next_write < jobs.size() && ready[next_write]) {
      results[next_write] += '\n';
      if (std::fwrite(results[next_write].data(), 1, results[next_write].size(), out) !=
          results[next_write].size())
        return io_error(output.string() + ": write failed");
      results[next_write].clear();
      results[next_write].shrink_to_fit();
      ++next_write;
      wrote = true;
    }
    if (wrote) std::fflush(out);
    bar.update(finished, sum.completion_tokens);
    if (!any && next_write < jobs.size() && !active.empty()) wake->wait(seen, std::memory_order_acquire);
  }
  bar.update(finished, sum.completion_tokens, true);
  if (std::fflush(out) != 0) return io_error(output.string() + ": write failed");
  sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  sum.tokens_per_s = sum.seconds > 0 ? double(sum.completion_tokens) / sum.seconds : 0;
  return sum;
}

}  // namespace astrai
