#include "src/tokenizer/post_processor.h"

namespace astrai::tok {

void PostProcessor::apply(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  for (const auto& tmpl : steps_) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Item& it : tmpl) {
      if (it.sequence)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), it.ids.begin(), it.ids.end());
    }
    ids.swap(out);
  }
}

std::vector<int32_t> PostProcessor::special_ids() const {
  std::vector<int32_t> out;
  for (const auto& step : steps_)
    for (const Item& it : step) out.insert(out.end(), it.ids.begin(), it.ids.end());
  return out;
}

std::vector<int32_t> PostProcessor::prefix_ids() const {
  std::vector<int32_t> marker{-1};
  apply(marker, true);
  std::vector<int32_t> prefix;
  for (int32_t id : marker) {
    if (id == -1) break;
    prefix.push_back(id);
  }
  return prefix;
}

namespace {

// ids of a {"id": "[CLS]", ...} / ["[CLS]", 101] style token.
std::vector<int32_t> pair_ids(const JsonEl& json) {
  std::vector<int32_t> ids;
  if (json.is_array()) {
    auto a = as_array(json);
    if (a.size() == 2) {
      int64_t id;
      if (a.at(1).get_int64().get(id) == simdjson::SUCCESS)
        ids.push_back(id >= 0 && id <= INT32_MAX ? int32_t(id) : -1);
    }
  }
  return ids;
}

}  // namespace

Result<PostProcessor> PostProcessor::parse(const JsonEl& json) {
  PostProcessor pp;
  if (json.is_null()) return pp;
  const std::string type = type_of(json);
  if (type == "ByteLevel") return pp;
  if (type == "Sequence") {
    auto list = member(json, "processors");
    if (list && list->is_array())
      for (JsonEl item : as_array(*list)) {
        ASTRAI_ASSIGN_OR_RETURN(PostProcessor sub, parse(item));
        for (auto& s : sub.steps_) pp.steps_.push_back(std::move(s));
      }
    return pp;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    std::vector<Item> tmpl;
    auto cls = member(json, "cls"), sep = member(json, "sep");
    if (cls) tmpl.push_back({false, pair_ids(*cls)});
    tmpl.push_back({true, {}});
    if (sep) tmpl.push_back({false, pair_ids(*sep)});
    pp.steps_.push_back(std::move(tmpl));
    return pp;
  }
  if (type == "TemplateProcessing") {
    auto single = member(json, "single");
    auto specials = member(json, "special_tokens");
    if (!single || !single->is_array())
      return unsupported(
          "tokenizer.json: post_processor TemplateProcessing without a `single` list is not supported");
    std::vector<Item> tmpl;
    for (JsonEl item : as_array(*single)) {
      if (member(item, "Sequence")) {
        tmpl.push_back({true, {}});
      } else if (auto sp = member(item, "SpecialToken")) {
        const std::string name = str_or(*sp, "id", "");
        Item it;
        auto def = specials ? member(*specials, name) : std::nullopt;
        auto ids = def ? member(*def, "ids") : std::nullopt;
        if (!ids || !ids->is_array())
          return corrupt("tokenizer.json: TemplateProcessing special token '" + name + "' has no ids");
        for (JsonEl v : as_array(*ids)) {
          int64_t id;
          if (v.get_int64().get(id) != simdjson::SUCCESS)
            return corrupt("tokenizer.json: bad TemplateProcessing id");
          it.ids.push_back(id >= 0 && id <= INT32_MAX ? int32_t(id) : -1);
        }
        tmpl.push_back(std::move(it));
      } else {
        return corrupt("tokenizer.json: TemplateProcessing item is neither Sequence nor SpecialToken");
      }
    }
    pp.steps_.push_back(std::move(tmpl));
    return pp;
  }
  return unsupported("tokenizer.json: post_processor type '" + type + "' is not supported");
}

}  // namespace astrai::tok
