#include "src/tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "src/core/utf8.h"
#include "src/tokenizer/chat_template_config.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai::tok {

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::create(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json,
                                                         std::string_view generation_config_json,
                                                         const ChatTemplateLimits& template_limits,
                                                         const ChatTemplateSources& templates) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(tokenizer_json);
  JsonEl root;
  if (auto err = parser.parse(padded).get(root); err != simdjson::SUCCESS)
    return corrupt(std::string("tokenizer.json: not valid JSON: ") + simdjson::error_message(err));
  if (!root.is_object()) return corrupt("tokenizer.json: the top level is not an object");

  auto get = [&](std::string_view key) -> std::optional<JsonEl> { return member(root, key); };

  auto model = get("model");
  if (!model) return corrupt("tokenizer.json: `model` is missing");
  std::string model_type = type_of(*model);
  if (model_type.empty() && member(*model, "merges")) model_type = "BPE";
  if (model_type != "BPE")
    return unsupported("tokenizer.json: model type '" + model_type + "' is not supported");

  if (auto n = get("normalizer")) {
    ASTRAI_ASSIGN_OR_RETURN(t->normalizer_, parse_normalizer(*n));
  }
  if (auto p = get("pre_tokenizer")) {
    ASTRAI_ASSIGN_OR_RETURN(t->pre_, parse_pre_tokenizer(*p));
  }
  ASTRAI_ASSIGN_OR_RETURN(t->model_, BpeModel::parse(*model, t->pre_.byte_level));
  if (auto p = get("post_processor")) {
    ASTRAI_ASSIGN_OR_RETURN(t->post_, PostProcessor::parse(*p));
  }
  if (auto d = get("decoder")) {
    ASTRAI_ASSIGN_OR_RETURN(t->decoder_, parse_decoder(*d));
  }

  // Added tokens.
  size_t max_id = t->model_->size();
  if (auto list = get("added_tokens"); list && list->is_array()) {
    for (JsonEl item : as_array(*list)) {
      AddedToken a;
      const int64_t id = int_or(item, "id", -1);
      a.content = str_or(item, "content", "");
      if (id < 0 || a.content.empty()) return corrupt("tokenizer.json: an added token has no id or content");
      if (id > kMaxTokenId)
        return corrupt("tokenizer.json: added_tokens: '" + a.content + "' has id " + std::to_string(id) +
                       ", beyond the largest supported token id " + std::to_string(kMaxTokenId));
      a.id = int32_t(id);
      a.special = bool_or(item, "special", false);
      a.lstrip = bool_or(item, "lstrip", false);
      a.rstrip = bool_or(item, "rstrip", false);
      a.single_word = bool_or(item, "single_word", false);
      a.normalized = bool_or(item, "normalized", !a.special);
      a.content = utf8_sanitize(a.content);
      max_id = std::max(max_id, size_t(id) + 1);
      t->added_.push_back(std::move(a));
    }
  }
  t->vocab_size_ = int32_t(max_id);
  t->flags_.assign(max_id, 0);
  std::vector<AddedToken> raw, norm;
  std::vector<std::string> raw_pat, norm_pat;
  for (const AddedToken& a : t->added_) {
    t->added_by_content_.emplace(a.content, a.id);
    t->added_by_id_[a.id] = a.content;
    t->flags_[size_t(a.id)] = kAdded | (a.special ? kSpecial : 0);
    if (a.normalized && t->normalizer_) {
      norm.push_back(a);
      norm_pat.push_back(t->normalizer_->normalize(a.content));
    } else {
      raw.push_back(a);
      raw_pat.push_back(a.content);
    }
  }
  t->raw_matcher_.build(raw, raw_pat);
  t->normalized_matcher_.build(norm, norm_pat);

  for (int32_t id : t->post_.special_ids())
    if (id < 0 || id >= t->vocab_size_)
      return corrupt("tokenizer.json: post_processor: special token id " + std::to_string(id) +
                     " is outside the vocabulary (" + std::to_string(t->vocab_size_) + " tokens)");
  ASTRAI_RETURN_IF_ERROR(
      t->load_config(tokenizer_config_json, generation_config_json, template_limits, templates));
  return t;
}

namespace {

// A token given as "text" or {"content": "text", ...}.
std::optional<std::string> token_text(const JsonEl& cfg, std::string_view key) {
  auto v = member(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::string(std::string_view(v->get_string().value_unsafe()));
  if (v->is_object()) {
    auto c = member(*v, "content");
    if (c && c->is_string()) return std::string(std::string_view(c->get_string().value_unsafe()));
  }
  return std::nullopt;
}

Status add_ids(const JsonEl& v, std::vector<int32_t>& out) {
  auto add = [&](int64_t id) {
    if (id < 0 || id > kMaxTokenId)
      return corrupt("generation_config.json: eos_token_id " + std::to_string(id) +
                     " is not a valid token id");
    out.push_back(int32_t(id));
    return Status::ok_status();
  };
  int64_t id;
  if (v.get_int64().get(id) == simdjson::SUCCESS) return add(id);
  if (v.is_array())
    for (JsonEl x : as_array(v))
      if (x.get_int64().get(id) == simdjson::SUCCESS) ASTRAI_RETURN_IF_ERROR(add(id));
  return Status::ok_status();
}

}  // namespace

Status HfTokenizer::load_config(std::string_view config_json, std::string_view generation_json,
                                const ChatTemplateLimits& template_limits,
                                const ChatTemplateSources& templates) {
  SpecialTokens& sp = special_;
  const std::vector<int32_t> prefix = post_.prefix_ids();
  ChatTemplateSources from_config;
  if (!config_json.empty()) {
    simdjson::dom::parser parser;
    const simdjson::padded_string padded(tame_big_integers(config_json));
    JsonEl cfg;
    if (auto err = parser.parse(padded).get(cfg); err != simdjson::SUCCESS || !cfg.is_object())
      return corrupt("tokenizer_config.json: not a valid JSON object");
    auto resolve = [&](std::string_view key, std::string& text, std::optional<int32_t>& id) {
      if (auto s = token_text(cfg, key)) {
        text = *s;
        id = token_to_id(*s);
      }
    };
    resolve("bos_token", sp.bos_token, sp.bos_id);
    resolve("eos_token", sp.eos_token, sp.eos_id);
    resolve("pad_token", sp.pad_token, sp.pad_id);
    sp.add_bos_token = bool_or(cfg, "add_bos_token", false);

    // The templates: one reader for the tokenizer and `astrai template` (chat_template_config.h). A
    // list that cannot be read leaves the tokenizer usable; chat routes then say why.
    auto named = config_chat_templates(config_json, "tokenizer_config.json");
    if (named.ok()) {
      from_config = std::move(named).value();
    } else {
      chat_template_status_ = named.status();
    }
  }
  const auto [main, tool_use] = files_over_config(templates, std::move(from_config));
  if (main) {
    auto parsed = ChatTemplate::parse(main->source, template_limits);
    if (parsed.ok()) {
      chat_template_ = std::move(parsed).value();
      chat_template_status_ = Status::ok_status();
    } else {
      chat_template_status_ = Status(parsed.status().code(), main->where + ": " + parsed.status().message());
    }
  }
  if (tool_use) {
    // One that does not parse leaves requests with tools to the main template.
    auto parsed = ChatTemplate::parse(tool_use->source, template_limits);
    if (parsed.ok()) tool_use_template_ = std::move(parsed).value();
  }
  // A post-processor that puts BOS first adds it too.
  if (sp.bos_id && !prefix.empty() && prefix.front() == *sp.bos_id) sp.add_bos_token = true;
  if (!sp.bos_id && !prefix.empty()) {
    sp.bos_id = prefix.front();
    sp.bos_token = id_to_token(prefix.front());
    sp.add_bos_token = true;
  }
  if (sp.eos_id) sp.stop_ids.push_back(*sp.eos_id);
  if (!generation_json.empty()) {
    simdjson::dom::parser parser;
    const simdjson::padded_string padded(tame_big_integers(generation_json));
    JsonEl gen;
    if (auto err = parser.parse(padded).get(gen); err != simdjson::SUCCESS || !gen.is_object())
      return corrupt("generation_config.json: not a valid JSON object");
    if (auto e = member(gen, "eos_token_id")) ASTRAI_RETURN_IF_ERROR(add_ids(*e, sp.stop_ids));
  }
  std::vector<int32_t> unique;
  for (int32_t id : sp.stop_ids)
    if (std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
  sp.stop_ids = std::move(unique);
  return Status::ok_status();
}

void HfTokenizer::encode_text(std::string_view text, bool first_section, std::vector<int32_t>& ids) const {
  thread_local PreTokenizeScratch scratch;
  thread_local std::vector<std::string_view> pieces;
  scratch.clear();
  pieces.assign(1, text);
  if (pre_.pre_tokenizer) pre_.pre_tokenizer->pre_tokenize(pieces, scratch, first_section);
  for (std::string_view p : pieces) model_->encode_word(p, ids);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::string sanitized;
  std::string_view text = input;
  if (!fast_utf8_is_valid(input)) {
    sanitized = utf8_sanitize(input);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Section> sections, subsections;
  raw_matcher_.split(text, sections);
  for (size_t si = 0; si < sections.size(); ++si) {
    const Section& s = sections[si];
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string normalized;
    std::string_view t = s.text;
    if (normalizer_) {
      normalized = normalizer_->normalize(std::string(t));
      t = normalized;
    }
    if (t.empty()) continue;
    if (normalized_matcher_.empty()) {
      encode_text(t, si == 0, ids);
      continue;
    }
    subsections.clear();
    normalized_matcher_.split(t, subsections);
    for (const Section& sub : subsections) {
      if (sub.id >= 0)
        ids.push_back(sub.id);
      else
        encode_text(sub.text, si == 0, ids);
    }
  }
  post_.apply(ids, add_special_tokens);
  return ids;
}

std::string HfTokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string out;
  if (decoder_.pure_byte_level && model_->byte_level()) {
    for (int32_t id : ids) {
      const uint8_t f = flag(id);
      if (skip_special_tokens && (f & kSpecial)) continue;
      if (f & kAdded)
        out += added_by_id_.at(id);
      else if (id >= 0 && size_t(id) < model_->size())
        out += model_->model_text(id);
    }
    return out;
  }
  std::vector<DecodePiece> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) {
    const uint8_t f = flag(id);
    if (skip_special_tokens && (f & kSpecial)) continue;
    if (f & kAdded)
      pieces.push_back({added_by_id_.at(id), true});
    else if (id >= 0 && size_t(id) < model_->size() && !model_->id_to_token(id).empty())
      pieces.push_back({model_->id_to_token(id), false});
  }
  if (!decoder_.decoder) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i) out += ' ';
      out += pieces[i].bytes;
    }
    return out;
  }
  decoder_.decoder->decode_chain(pieces);
  for (const DecodePiece& p : pieces) out += p.bytes;
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return utf8_sanitize(decode_bytes(ids, skip_special_tokens));
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  if (flag(id) & kAdded) return added_by_id_.at(id);
  return model_->id_to_token(id);
}

}  // namespace astrai::tok
