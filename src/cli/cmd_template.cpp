// astrai template --model DIR
//   stdin: one JSON {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool,
//   "chat_template_kwargs"?: {...}} per line -> {"text": rendered prompt} per line, rendered with the
//   model's chat_template exactly as transformers' apply_chat_template(tokenize=False) would.
// A bad line prints {"error": "line N: ..."} and the run goes on; the exit code is 1 at the end if
// any line failed. --model may also name a preset (the built-in ChatML template).
#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "src/cli/commands.h"
#include "src/cli/jsonl.h"
#include "src/core/json_writer.h"
#include "src/model/config.h"
#include "src/tokenizer/chat_template_config.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

struct TemplateOptions {
  CommonOptions common;
  std::string model;
};

Result<LoadedChatTemplate> load_for(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return load_chat_template(model);
  for (const std::string& preset : preset_names())
    if (model == preset)
      return chat_template_from_config(builtin_tokenizer_config_json(), "built-in tokenizer");
  return not_found("--model " + model + ": not a directory and not a preset name (" + preset_list() + ")");
}

// One request line -> the rendered prompt, or the reason it cannot be rendered.
Result<std::string> render_line(const LoadedChatTemplate& t, simdjson::dom::parser& parser,
                                const std::string& line) {
  const simdjson::padded_string padded(line);
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return invalid_argument(std::string("not valid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return invalid_argument("expected a JSON object");
  ChatTemplateInput in;
  in.bos_token = t.bos_token;
  in.eos_token = t.eos_token;
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "messages") {
      if (!field.value.is_array()) return invalid_argument("\"messages\" must be an array");
      in.messages_json = simdjson::minify(field.value);
    } else if (key == "tools") {
      if (field.value.is_null()) continue;
      if (!field.value.is_array()) return invalid_argument("\"tools\" must be an array");
      in.tools_json = simdjson::minify(field.value);
    } else if (key == "add_generation_prompt") {
      if (!field.value.is_bool()) return invalid_argument("\"add_generation_prompt\" must be true or false");
      in.add_generation_prompt = field.value.get_bool().value_unsafe();
    } else if (key == "chat_template_kwargs") {
      if (!field.value.is_object()) return invalid_argument("\"chat_template_kwargs\" must be an object");
      in.extra_context_json = simdjson::minify(field.value);
    } else {
      return invalid_argument("unknown field \"" + std::string(key) +
                              "\" (expected messages, tools, add_generation_prompt, chat_template_kwargs)");
    }
  }
  if (obj["messages"].error() != simdjson::SUCCESS) return invalid_argument("missing \"messages\"");
  // With tools, the template named tool_use where there is one (as transformers and `serve` pick it).
  const ChatTemplate* tmpl = !in.tools_json.empty() && t.tool_use ? t.tool_use.get() : t.tmpl.get();
  return tmpl->render(in);
}

void run(const TemplateOptions& o) {
  apply_common_options(o.common);
  LoadedChatTemplate t = load_for(o.model).value();
  simdjson::dom::parser parser;
  map_stdin_jsonl([&](std::string_view line) -> Result<std::string> {
    ASTRAI_ASSIGN_OR_RETURN(std::string text, render_line(t, parser, std::string(line)));
    JsonWriter w;
    w.begin_object().key("text").value(text).end_object();
    return w.take();
  });
}

void register_template(CLI::App& app) {
  auto opts = std::make_shared<TemplateOptions>();
  CLI::App* sub = app.add_subcommand(
      "template",
      "Render the model's chat template (stdin JSONL {\"messages\", \"tools\"?, ...} -> {\"text\"})");
  sub->add_option("--model", opts->model, "Model directory with tokenizer_config.json, or a preset name")
      ->required();
  add_common_options(*sub, opts->common);
  sub->callback([opts] { run(*opts); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("template", astrai::cli::register_template);
