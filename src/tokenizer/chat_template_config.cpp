#include "src/tokenizer/chat_template_config.h"

#include <simdjson.h>

#include <optional>

#include "src/core/file_text.h"
#include "src/tokenizer/json_util.h"

namespace astrai {
namespace {

namespace fs = std::filesystem;

// A special token as tokenizer_config.json writes it: "text", {"content": "text", ...} or null.
std::string token_text(simdjson::dom::object cfg, const char* key) {
  simdjson::dom::element v;
  if (cfg.at_key(key).get(v) != simdjson::SUCCESS) return "";
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  if (v.is_object() && v.at_key("content").get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  return "";
}

Result<simdjson::dom::object> parse_config(simdjson::dom::parser& parser, std::string_view config_json,
                                           const std::string& where) {
  simdjson::dom::element doc;
  if (auto err = parser.parse(simdjson::padded_string(tok::tame_big_integers(config_json))).get(doc);
      err != simdjson::SUCCESS)
    return corrupt(where + ": invalid JSON: " + simdjson::error_message(err));
  simdjson::dom::object cfg;
  if (doc.get_object().get(cfg) != simdjson::SUCCESS) return corrupt(where + ": not a JSON object");
  return cfg;
}

// The special tokens of a tokenizer_config.json.
Result<LoadedChatTemplate> read_tokens(std::string_view config_json, const std::string& where) {
  simdjson::dom::parser parser;
  ASTRAI_ASSIGN_OR_RETURN(simdjson::dom::object cfg, parse_config(parser, config_json, where));
  LoadedChatTemplate out;
  out.bos_token = token_text(cfg, "bos_token");
  out.eos_token = token_text(cfg, "eos_token");
  return out;
}

// Parses `named`'s templates into out (main required: `missing` names where it was looked for).
Status parse_into(LoadedChatTemplate& out, const ChatTemplateSources& named, const std::string& missing,
                  const ChatTemplateLimits& limits) {
  if (!named.main) return not_found(missing + ": no chat_template");
  out.source = named.main->source;
  auto t = ChatTemplate::parse(out.source, limits);
  if (!t.ok()) return Status(t.status().code(), named.main->where + ": " + t.status().message());
  out.tmpl = std::move(t).value();
  if (named.tool_use) {
    auto u = ChatTemplate::parse(named.tool_use->source, limits);
    if (!u.ok()) return Status(u.status().code(), named.tool_use->where + ": " + u.status().message());
    out.tool_use = std::move(u).value();
  }
  return Status::ok_status();
}

}  // namespace

Result<ChatTemplateSources> config_chat_templates(std::string_view config_json, const std::string& where) {
  simdjson::dom::parser parser;
  ASTRAI_ASSIGN_OR_RETURN(simdjson::dom::object cfg, parse_config(parser, config_json, where));
  ChatTemplateSources out;
  simdjson::dom::element v;
  if (cfg.at_key("chat_template").get(v) != simdjson::SUCCESS || v.is_null()) return out;
  const std::string field = where + ": chat_template";
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    out.main = ChatTemplateText{std::string(s), field};
    return out;
  }
  simdjson::dom::array list;
  if (v.get_array().get(list) != simdjson::SUCCESS)
    return invalid_argument(field + " must be a string or a list of {name, template}");
  bool have_default = false;
  for (simdjson::dom::element item : list) {
    std::string_view name, text;
    if (item.at_key("name").get_string().get(name) != simdjson::SUCCESS ||
        item.at_key("template").get_string().get(text) != simdjson::SUCCESS)
      return invalid_argument(field + " must be a string or a list of {name, template}");
    ChatTemplateText t{std::string(text), field + " '" + std::string(name) + "'"};
    if (name == "tool_use") out.tool_use = t;
    if (!have_default && (!out.main || name == "default")) {
      out.main = std::move(t);
      have_default = name == "default";
    }
  }
  return out;
}

Result<LoadedChatTemplate> chat_template_from_config(std::string_view config_json, const std::string& where,
                                                     const ChatTemplateLimits& limits) {
  ASTRAI_ASSIGN_OR_RETURN(LoadedChatTemplate out, read_tokens(config_json, where));
  ASTRAI_ASSIGN_OR_RETURN(ChatTemplateSources named, config_chat_templates(config_json, where));
  ASTRAI_RETURN_IF_ERROR(parse_into(out, named, where, limits));
  return out;
}

Result<ChatTemplateSources> chat_template_files(const fs::path& dir) {
  ChatTemplateSources out;
  for (auto [path, slot] : {std::pair{dir / "chat_template.jinja", &out.main},
                            std::pair{dir / "additional_chat_templates" / "tool_use.jinja", &out.tool_use}}) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    ASTRAI_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    *slot = ChatTemplateText{std::move(text), path.string()};
  }
  return out;
}

ChatTemplateSources files_over_config(ChatTemplateSources files, ChatTemplateSources config) {
  if (!files.main) files.main = std::move(config.main);
  if (!files.tool_use) files.tool_use = std::move(config.tool_use);
  return files;
}

Result<LoadedChatTemplate> load_chat_template(const fs::path& dir, const ChatTemplateLimits& limits) {
  const fs::path cfg_path = dir / "tokenizer_config.json";
  // An unreadable config is as good as none here (the error names what was looked for).
  Result<std::string> read = read_text_file(cfg_path);
  std::optional<std::string> cfg;
  if (read.ok()) cfg = std::move(read).value();
  ASTRAI_ASSIGN_OR_RETURN(ChatTemplateSources named, chat_template_files(dir));
  if (!cfg && !named.main) return not_found(cfg_path.string() + ": not found");
  LoadedChatTemplate out;
  if (cfg) {
    ASTRAI_ASSIGN_OR_RETURN(out, read_tokens(*cfg, cfg_path.string()));
    ASTRAI_ASSIGN_OR_RETURN(ChatTemplateSources from_config, config_chat_templates(*cfg, cfg_path.string()));
    named = files_over_config(std::move(named), std::move(from_config));
  }
  ASTRAI_RETURN_IF_ERROR(parse_into(out, named, cfg_path.string(), limits));
  return out;
}

}  // namespace astrai
