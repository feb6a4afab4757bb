// astrai tokenize --model DIR [--text STR]
//   stdin: one JSON {"text": ...} per line -> {"ids": [...]} per line; --text prints one line.
// A bad line prints {"error": "line N: ..."} and the run goes on; the exit code is 1 at the end if
// any line failed. Input bytes that are not UTF-8 become U+FFFD first (as Python's
// errors="replace" reading the file would), so the line still parses.
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

struct TokenizeOptions {
  CommonOptions common;
  std::string model;
  std::string text;
  bool add_special_tokens = true;
};

std::string ids_line(const std::vector<int32_t>& ids) {
  JsonWriter w;
  w.begin_object().key("ids").begin_array();
  for (int32_t id : ids) w.value(int64_t(id));
  w.end_array().end_object();
  return w.take();
}

void run(const TokenizeOptions& o, bool has_text) {
  apply_common_options(o.common);
  auto tok = Tokenizer::load_or_preset(o.model, preset_names()).value();
  if (has_text) {
    std::printf("%s\n", ids_line(tok->encode(o.text, o.add_special_tokens)).c_str());
    return;
  }
  simdjson::dom::parser parser;
  map_stdin_jsonl([&](std::string_view line) -> Result<std::string> {
    const simdjson::padded_string padded(utf8_sanitize(line));
    simdjson::dom::element doc;
    std::string_view text;
    if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
      return invalid_argument(std::string("not valid JSON: ") + simdjson::error_message(err));
    if (!doc.is_object() || doc["text"].get_string().get(text) != simdjson::SUCCESS)
      return invalid_argument("expected an object with a string field \"text\"");
    return ids_line(tok->encode(text, o.add_special_tokens));
  });
}

void register_tokenize(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* sub =
      app.add_subcommand("tokenize", "Text to token ids (stdin JSONL {\"text\"} -> {\"ids\"}, or --text)");
  sub->add_option("--model", opts->model, "Model directory with tokenizer.json, or a preset name")
      ->required();
  CLI::Option* text = sub->add_option("--text", opts->text, "Tokenize this text and print one line");
  sub->add_flag("--add-special-tokens,!--no-add-special-tokens", opts->add_special_tokens,
                "Apply the post-processor's special tokens, e.g. BOS (default on)");
  add_common_options(*sub, opts->common);
  sub->callback([opts, text] { run(*opts, text->count() > 0); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("tokenize", astrai::cli::register_tokenize);
