#include "src/tokenizer/chat_template_config.h"

#include <simdjson.h>

#include <fstream>
#include <optional>
#include <sstream>

namespace astrai {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A special token as tokenizer_config.json writes it: "text", {"content": "text", ...} or null.
std::string token_text(simdjson::dom::object cfg, const char* key) {
  simdjson::dom::element v;
  if (cfg.at_key(key).get(v) != simdjson::SUCCESS) return "";
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  if (v.is_object() && v.at_key("content").get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  return "";
}

// "chat_template": "..." or [{"name": "default", "template": "..."}, ...]; nullopt when absent.
Result<std::optional<std::string>> template_text(simdjson::dom::object cfg, const std::string& where) {
  simdjson::dom::element v;
  if (cfg.at_key("chat_template").get(v) != simdjson::SUCCESS || v.is_null())
    return std::optional<std::string>();
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) return std::optional<std::string>(std::string(s));
  simdjson::dom::array list;
  if (v.get_array().get(list) == simdjson::SUCCESS) {
    for (simdjson::dom::element item : list) {
      std::string_view name, text;
      if (item.at_key("name").get_string().get(name) == simdjson::SUCCESS && name == "default" &&
          item.at_key("template").get_string().get(text) == simdjson::SUCCESS)
        return std::optional<std::string>(std::string(text));
    }
    return not_found(where + ": chat_template has no template named \"default\"");
  }
  return invalid_argument(where + ": chat_template must be a string or a list of {name, template}");
}

// simdjson rejects integers beyond 64 bits, which real configs contain (Llama 3's
// "model_max_length": 1000000000000000019884624838656). Python reads them fine; we turn such
// literals into floats (appending ".0") since nothing here needs their exact value.
std::string widen_big_integers(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c != '-' && !(c >= '0' && c <= '9')) {
      out += c;
      continue;
    }
    size_t e = i + 1;
    while (e < json.size() && std::string_view("0123456789.eE+-").find(json[e]) != std::string_view::npos)
      ++e;
    std::string_view num = json.substr(i, e - i);
    out += num;
    size_t digits = num.size() - (num[0] == '-' ? 1 : 0);
    if (num.find_first_of(".eE") == std::string_view::npos && digits > 19) out += ".0";
    i = e - 1;
  }
  return out;
}

// Tokens and (when present) the template text of a tokenizer_config.json.
Result<LoadedChatTemplate> read_config(std::string_view config_json, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(widen_big_integers(config_json));
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return corrupt(where + ": invalid JSON: " + simdjson::error_message(err));
  simdjson::dom::object cfg;
  if (doc.get_object().get(cfg) != simdjson::SUCCESS) return corrupt(where + ": not a JSON object");
  LoadedChatTemplate out;
  out.bos_token = token_text(cfg, "bos_token");
  out.eos_token = token_text(cfg, "eos_token");
  auto text = template_text(cfg, where);
  if (!text.ok()) return text.status();
  if (*text) out.source = std::move(**text);
  return out;
}

Status parse_into(LoadedChatTemplate& out, const std::string& where, const ChatTemplateLimits& limits) {
  auto t = ChatTemplate::parse(out.source, limits);
  if (!t.ok()) return Status(t.status().code(), where + ": " + t.status().message());
  out.tmpl = std::move(t).value();
  return Status::ok_status();
}

}  // namespace

Result<LoadedChatTemplate> chat_template_from_config(std::string_view config_json, const std::string& where,
                                                     const ChatTemplateLimits& limits) {
  auto r = read_config(config_json, where);
  if (!r.ok()) return r.status();
  LoadedChatTemplate out = std::move(r).value();
  if (out.source.empty()) return not_found(where + ": no chat_template");
  ASTRAI_RETURN_IF_ERROR(parse_into(out, where, limits));
  return out;
}

Result<ChatTemplateSources> chat_template_files(const fs::path& dir) {
  ChatTemplateSources out;
  for (auto [path, slot] : {std::pair{dir / "chat_template.jinja", &out.main},
                            std::pair{dir / "additional_chat_templates" / "tool_use.jinja", &out.tool_use}}) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    std::optional<std::string> text = read_text(path);
    if (!text) return io_error(path.string() + ": cannot read it");
    *slot = ChatTemplateText{std::move(*text), path.string()};
  }
  return out;
}

Result<LoadedChatTemplate> load_chat_template(const fs::path& dir, const ChatTemplateLimits& limits) {
  const fs::path cfg_path = dir / "tokenizer_config.json";
  std::optional<std::string> cfg = read_text(cfg_path);
  ASTRAI_ASSIGN_OR_RETURN(ChatTemplateSources files, chat_template_files(dir));
  std::optional<ChatTemplateText>& jinja = files.main;
  if (!cfg && !jinja) return not_found(cfg_path.string() + ": not found");
  LoadedChatTemplate out;
  if (cfg) {
    auto r = read_config(*cfg, cfg_path.string());
    if (!r.ok()) return r.status();
    out = std::move(r).value();
  }
  if (jinja) {
    out.source = std::move(jinja->source);
    ASTRAI_RETURN_IF_ERROR(parse_into(out, jinja->where, limits));
    return out;
  }
  if (out.source.empty()) return not_found(cfg_path.string() + ": no chat_template");
  ASTRAI_RETURN_IF_ERROR(parse_into(out, cfg_path.string(), limits));
  return out;
}

}  // namespace astrai
