#include "src/engine/offline.h"

#include <simdjson.h>
#include <unistd.h>

#include <atomic>
#include <cfloat>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <unordered_set>

#include "src/core/json_fields.h"
#include "src/core/json_writer.h"
#include "src/engine/generation.h"
#include "src/structured/response_format.h"
#include "src/tokenizer/chat_template.h"

namespace astrai {
namespace {

using Clock = std::chrono::steady_clock;

// What one choice of a line produced.
struct LineChoice {
  std::string text;
  std::vector<int32_t> token_ids;            // every token generated, the one that ended the choice included
  FinishReason finish = FinishReason::none;  // stop or length
};

// One input line: its request, then its generation, then its output line.
struct LineJob {
  int line_no = 0;
  std::string id_json;
  std::string error;  // set: the output is an error line
  GenerationSpec spec;
  std::unique_ptr<Generation> gen;
  std::vector<LineChoice> choices;
  int prompt_tokens = 0, completion_tokens = 0;
};

std::string error_line(const LineJob& j) {
  JsonWriter w;
  w.begin_object().key("id").raw(j.id_json).key("error").value(j.error).end_object();
  return w.take();
}

std::string result_line(const LineJob& j) {
  JsonWriter w;
  w.begin_object().key("id").raw(j.id_json);
  bool any_length = false;
  for (const auto& c : j.choices) any_length |= c.finish == FinishReason::length;
  auto ids = [&w](const std::vector<int32_t>& v) {
    w.begin_array();
    for (int32_t t : v) w.value(int64_t(t));
    w.end_array();
  };
  if (j.choices.size() == 1) {
    w.key("text").value(j.choices[0].text);
    w.key("token_ids");
    ids(j.choices[0].token_ids);
  } else {
    w.key("texts").begin_array();
    for (const auto& c : j.choices) w.value(c.text);
    w.end_array();
    w.key("token_ids").begin_array();
    for (const auto& c : j.choices) ids(c.token_ids);
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
      .value(int64_t(j.prompt_tokens))
      .key("completion_tokens")
      .value(int64_t(j.completion_tokens));
  w.end_object().end_object();
  return w.take();
}

std::string field_message(const json::FieldError& e) {
  return "'" + e.field + "': " + e.message;
}

// JSON text with insignificant whitespace removed, so ids compare equal however they were written.
std::string minified(std::string_view json_text) {
  std::string out(json_text.size(), '\0');
  size_t len = 0;
  if (simdjson::minify(json_text.data(), json_text.size(), out.data(), len)) return std::string(json_text);
  out.resize(len);
  return out;
}

// The offline dialect's integers are JSON integers as written (5, not 5.0).
json::MaybeFieldError read_integer(json::Value& v, const std::string& field, int64_t lo, int64_t hi,
                                   int64_t& out) {
  const std::string_view tok = v.raw_json_token();
  if (tok.find_first_of(".eE") != std::string_view::npos)
    return json::FieldError{field, "must be an integer"};
  return json::read_int(v, field, lo, hi, out);
}

// A string or a list of strings; empty ones are ignored, null is none.
json::MaybeFieldError read_stops(json::Value& v, std::vector<std::string>& out) {
  const json::FieldError bad{"stop", "must be a string or a list of strings"};
  simdjson::ondemand::json_type t;
  if (v.type().get(t)) return bad;
  if (t == simdjson::ondemand::json_type::null) return std::nullopt;
  if (t == simdjson::ondemand::json_type::string) {
    std::string s;
    if (json::read_string(v, "stop", s)) return bad;
    if (!s.empty()) out.push_back(std::move(s));
    return std::nullopt;
  }
  simdjson::ondemand::array arr;
  if (t != simdjson::ondemand::json_type::array || v.get_array().get(arr)) return bad;
  for (auto el : arr) {
    json::Value ev;
    std::string s;
    if (el.get(ev) || json::read_string(ev, "stop", s)) return bad;
    if (!s.empty()) out.push_back(std::move(s));
  }
  return std::nullopt;
}

// A list of token ids (JSON integers in [0, 2^31)), non-empty for a prompt; the engine checks them
// against the model's vocabulary.
json::MaybeFieldError read_token_ids(json::Value& v, const std::string& field, bool non_empty,
                                     std::vector<int32_t>& out) {
  const json::FieldError bad{field, std::string("must be a ") + (non_empty ? "non-empty " : "") +
                                        "list of token ids (integers >= 0)"};
  simdjson::ondemand::array arr;
  if (v.get_array().get(arr)) return bad;
  out.clear();
  if (json::read_token_ids(arr, field, INT32_MAX, out) || (non_empty && out.empty())) return bad;
  return std::nullopt;
}

// A line's fields before tokenization, which waits until the id is known not to be done already.
struct LineFields {
  std::string id_json;  // minified; empty: not given
  std::optional<std::string> prompt, messages_json;
  std::string template_kwargs_json;  // chat_template_kwargs ("" when not given)
  std::optional<std::vector<int32_t>> prompt_ids;
  std::string error;  // the line's first problem
};

// Reads one JSONL line into spec (sampling, limits, stop strings) and `f` (id, prompt / messages).
// The offline dialect's own rules: integers as written (5, not 5.0), max_tokens up to 2^24, top_k -1
// meaning off, a non-negative seed, any number of stop strings (empty ones ignored). The ranges every
// dialect shares are checked afterwards by validate_sampling. After a bad field the rest of the line
// is still read for its id, which the error line echoes.
void read_line(simdjson::dom::parser& dom, simdjson::ondemand::parser& parser, const std::string& line,
               GenerationSpec& spec, LineFields& f) {
  auto& s = spec.sampling;
  auto read_field = [&](std::string_view key, json::Value& v) -> json::MaybeFieldError {
    int64_t i = 0;
    double d = 0;
    json::MaybeFieldError e;
    if (key == "prompt") {
      std::string p;
      if (!(e = json::read_string(v, "prompt", p))) f.prompt = std::move(p);
    } else if (key == "messages") {
      simdjson::ondemand::json_type t;
      std::string raw;
      if (v.type().get(t) || t != simdjson::ondemand::json_type::array || json::read_raw(v, "messages", raw))
        return json::FieldError{"messages", "must be an array of messages"};
      f.messages_json = std::move(raw);
    } else if (key == "chat_template_kwargs") {
      simdjson::ondemand::json_type t;
      if (v.type().get(t) || t != simdjson::ondemand::json_type::object ||
          json::read_raw(v, "chat_template_kwargs", f.template_kwargs_json))
        return json::FieldError{"chat_template_kwargs", "must be an object of template variables"};
    } else if (key == "prompt_ids") {
      e = read_token_ids(v, "prompt_ids", true, f.prompt_ids.emplace());
    } else if (key == "ignore_eos") {
      bool b = false;
      if (v.get_bool().get(b)) return json::FieldError{"ignore_eos", "must be true or false"};
      spec.ignore_eos = b;
    } else if (key == "max_tokens") {
      if (!(e = read_integer(v, "max_tokens", 1, 1 << 24, i))) spec.max_tokens = int(i);
    } else if (key == "temperature" || key == "top_p" || key == "min_p") {
      if (!(e = json::read_number(v, std::string(key), -DBL_MAX, DBL_MAX, d)))
        (key == "temperature" ? s.temperature : key == "top_p" ? s.top_p : s.min_p) = float(d);
    } else if (key == "top_k") {
      if (!(e = read_integer(v, "top_k", -1, 1 << 30, i))) s.top_k = i < 0 ? 0 : int(i);
    } else if (key == "seed") {
      uint64_t seed = 0;
      if (v.raw_json_token().find_first_of(".eE") != std::string_view::npos || v.get_uint64().get(seed))
        return json::FieldError{"seed", "must be a non-negative integer"};
      s.seed = seed;
    } else if (key == "n") {
      if (!(e = read_integer(v, "n", 1, kMaxChoices, i))) spec.n = int(i);
    } else if (key == "stop") {
      e = read_stops(v, spec.stop);
    } else if (key == "stop_token_ids") {
      e = read_token_ids(v, "stop_token_ids", false, spec.stop_ids);
    } else if (key == "min_tokens") {
      if (!(e = read_integer(v, "min_tokens", 0, 1 << 24, i))) s.min_tokens = int(i);
    } else {
      // response_format and the other structured-output fields, read as the server reads them.
      bool handled = false;
      e = structured::read_constraint_field(key, v, spec.constraint, handled);
    }
    return e;
  };
  auto on_field = [&](std::string_view key, json::Value& v) -> json::MaybeFieldError {
    if (key == "id") {
      std::string raw;
      if (auto e = json::read_raw(v, "id", raw)) return e;
      f.id_json = minified(raw);
    } else if (f.error.empty()) {
      if (auto e = read_field(key, v)) f.error = field_message(*e);
    }
    return std::nullopt;
  };
  // The DOM parser validates the whole line first (on-demand parsing would not look past the object).
  simdjson::dom::element whole;
  if (auto ec = dom.parse(line).get(whole)) {
    f.error = std::string("invalid JSON (") + simdjson::error_message(ec) + ")";
    return;
  }
  const simdjson::padded_string padded(line);
  simdjson::ondemand::document doc;
  simdjson::ondemand::object obj;
  auto invalid = [&](simdjson::error_code ec) -> json::MaybeFieldError {
    return json::FieldError{"", std::string("invalid JSON (") + simdjson::error_message(ec) + ")"};
  };
  json::MaybeFieldError e;
  if (auto ec = parser.iterate(padded).get(doc))
    e = invalid(ec);
  else if (doc.get_object().get(obj))
    e = json::FieldError{"", "expected a JSON object"};
  else
    e = json::for_each_field(obj, on_field, invalid);
  if (e) f.error = e->message;
}

// Tokenizes the prompt or renders the messages through the model's chat template.
std::string tokenize_prompt(const Tokenizer& tok, const LineFields& f, std::vector<int32_t>& prompt) {
  if (int(f.prompt.has_value()) + int(f.messages_json.has_value()) + int(f.prompt_ids.has_value()) > 1)
    return "give one of \"prompt\", \"prompt_ids\" and \"messages\"";
  if (f.prompt_ids) {
    prompt = *f.prompt_ids;
    return {};
  }
  if (f.prompt) {
    prompt = tok.encode(*f.prompt, true);
    return {};
  }
  if (!f.messages_json)
    return "needs \"prompt\" (a string), \"prompt_ids\" (a list of token ids) or \"messages\" (a list)";
  auto found = tok.template_for(/*with_tools=*/false);
  if (!found.ok()) return "'messages' needs a chat template: " + found.status().message();
  const ChatTemplate* tmpl = *found;
  ChatTemplateInput in;
  in.messages_json = *f.messages_json;
  in.add_generation_prompt = true;
  in.extra_context_json = f.template_kwargs_json;
  in.bos_token = tok.special_tokens().bos_token;
  in.eos_token = tok.special_tokens().eos_token;
  auto text = tmpl->render(in);
  if (!text.ok()) return "chat template: " + text.status().message();
  prompt = tok.encode(text.value(), false);
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

// Applies a line's deltas; an engine-side error or cancellation makes the line an error line.
void apply_deltas(LineJob& j, const std::vector<ChoiceDelta>& deltas) {
  for (const auto& d : deltas) {
    LineChoice& c = j.choices[size_t(d.choice)];
    c.text += d.text;
    for (const TokenInfo& t : d.tokens) c.token_ids.push_back(t.id);
    if (d.finish == FinishReason::none) continue;
    c.finish = d.finish == FinishReason::length ? FinishReason::length : FinishReason::stop;
    if (d.finish == FinishReason::error || d.finish == FinishReason::cancelled)
      j.error = "line " + std::to_string(j.line_no) + ": " +
                (d.error.empty() ? std::string("generation ") + finish_reason_name(d.finish) : d.error);
  }
}

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
  std::vector<std::unique_ptr<LineJob>> jobs;
  simdjson::dom::parser dom;
  simdjson::ondemand::parser parser;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++sum.lines;
    auto job = std::make_unique<LineJob>();
    job->line_no = line_no;
    GenerationSpec& spec = job->spec;
    spec.max_tokens = o.max_tokens;
    spec.sampling = o.sampling;
    spec.stop_ids = o.stop_ids;
    spec.ignore_eos = o.ignore_eos;
    LineFields f;
    read_line(dom, parser, line, spec, f);
    job->id_json = f.id_json.empty() ? std::to_string(line_no) : f.id_json;
    if (done_ids.count(job->id_json)) {
      ++sum.skipped;
      continue;
    }
    std::string err = f.error;
    if (err.empty()) err = tokenize_prompt(tok, f, spec.prompt);
    if (err.empty())
      if (auto pe = validate_sampling(spec.sampling, spec.max_tokens, spec.n, 0))
        err = std::string("'") + request_field_name(pe->field) + "': " + pe->message;
    if (!err.empty()) job->error = "line " + std::to_string(line_no) + ": " + err;
    jobs.push_back(std::move(job));
  }

  std::FILE* out = std::fopen(output.c_str(), o.resume ? "ab" : "wb");
  if (!out) return io_error(output.string() + ": cannot open for writing");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out_guard(out, &std::fclose);

  // The engine wakes us through the requests' notify hook.
  auto wake = std::make_shared<std::atomic<uint32_t>>(0);
  const auto notify = [wake] {
    wake->fetch_add(1, std::memory_order_release);
    wake->notify_one();
  };
  std::vector<std::string> results(jobs.size());
  std::vector<bool> ready(jobs.size(), false);
  size_t next_write = 0, next_submit = 0;
  std::vector<size_t> active;
  Progress bar(o.progress, int(jobs.size()));
  int finished = 0;

  auto finish_job = [&](size_t i) {
    LineJob& j = *jobs[i];
    if (j.gen) {
      j.prompt_tokens = j.gen->prompt_tokens();
      j.completion_tokens = j.gen->completion_tokens();
      j.gen.reset();
    }
    if (!j.error.empty()) {
      results[i] = error_line(j);
      ++sum.errors;
    } else {
      results[i] = result_line(j);
      ++sum.completed;
      sum.prompt_tokens += uint64_t(j.prompt_tokens);
      sum.completion_tokens += uint64_t(j.completion_tokens);
    }
    ready[i] = true;
    ++finished;
  };

  std::vector<ChoiceDelta> deltas;
  while (next_write < jobs.size()) {
    // Submit what the engine's queue takes.
    while (next_submit < jobs.size()) {
      LineJob& j = *jobs[next_submit];
      if (!j.error.empty()) {
        finish_job(next_submit++);
        continue;
      }
      auto g = Generation::start(engine, tok, j.spec, notify);
      if (!g.ok() && g.status().code() == ErrorCode::resource_exhausted && !active.empty()) break;
      if (!g.ok()) {
        j.error = "line " + std::to_string(j.line_no) + ": " + g.status().message();
        finish_job(next_submit++);
        continue;
      }
      j.gen = std::move(g).value();
      j.spec = {};
      j.choices.resize(size_t(j.gen->n()));
      active.push_back(next_submit++);
    }

    const uint32_t seen = wake->load(std::memory_order_acquire);
    bool any = false;
    for (size_t k = 0; k < active.size();) {
      LineJob& j = *jobs[active[k]];
      deltas.clear();
      const bool done = j.gen->pump(deltas);
      any |= !deltas.empty();
      apply_deltas(j, deltas);
      if (done) {
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
