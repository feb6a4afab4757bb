// astrai detokenize --model DIR [--skip-special-tokens]
//   stdin: one JSON {"ids": [...]} per line -> {"text": ...} per line.
// A bad line (not JSON, ids not integers, an id out of range) prints {"error": "line N: ..."} and
// the run goes on; the exit code is 1 at the end if any line failed.
#include <simdjson.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "src/cli/commands.h"
#include "src/cli/jsonl.h"
#include "src/core/json_writer.h"
#include "src/model/config.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

struct DetokenizeOptions {
  CommonOptions common;
  std::string model;
  bool skip_special_tokens = false;
};

// Reads {"ids": [...]}; returns an error message, or "" with ids filled.
std::string parse_ids(simdjson::dom::element doc, int32_t vocab_size, std::vector<int32_t>& ids) {
  simdjson::dom::array arr;
  if (!doc.is_object() || doc["ids"].get_array().get(arr) != simdjson::SUCCESS)
    return "expected an object with an array field \"ids\"";
  for (simdjson::dom::element v : arr) {
    int64_t id;
    if (v.get_int64().get(id) != simdjson::SUCCESS) return "ids must be integers";
    if (id < 0 || id >= vocab_size)
      return "id " + std::to_string(id) + " is out of range (vocabulary size " + std::to_string(vocab_size) +
             ")";
    ids.push_back(int32_t(id));
  }
  return "";
}

void run(const DetokenizeOptions& o) {
  apply_common_options(o.common);
  auto tok = Tokenizer::load_or_preset(o.model, preset_names()).value();
  simdjson::dom::parser parser;
  map_stdin_jsonl([&](std::string_view line) -> Result<std::string> {
    const simdjson::padded_string padded(line);
    simdjson::dom::element doc;
    std::vector<int32_t> ids;
    if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
      return invalid_argument(std::string("not valid JSON: ") + simdjson::error_message(err));
    if (std::string msg = parse_ids(doc, tok->vocab_size(), ids); !msg.empty()) return invalid_argument(msg);
    JsonWriter w;
    w.begin_object().key("text").value(tok->decode(ids, o.skip_special_tokens)).end_object();
    return w.take();
  });
}

void register_detokenize(CLI::App& app) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* sub = app.add_subcommand("detokenize", "Token ids to text (stdin JSONL {\"ids\"} -> {\"text\"})");
  sub->add_option("--model", opts->model, "Model directory with tokenizer.json, or a preset name")
      ->required();
  sub->add_flag("--skip-special-tokens", opts->skip_special_tokens, "Leave special tokens out of the text");
  add_common_options(*sub, opts->common);
  sub->callback([opts] { run(*opts); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("detokenize", astrai::cli::register_detokenize);
