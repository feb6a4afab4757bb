// tokenizer.json "post_processor": TemplateProcessing (its `single` template), ByteLevel (ids
// unchanged), BertProcessing / RobertaProcessing (cls ... sep) and Sequence of those.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"

namespace astrai::tok {

class PostProcessor {
 public:
  // Applies the single-sequence template; with add_special_tokens false it only keeps the text.
  void apply(std::vector<int32_t>& ids, bool add_special_tokens) const;
  // The ids put before the text (e.g. BOS) when special tokens are added.
  std::vector<int32_t> prefix_ids() const;
  // Every special id the templates insert (-1 for one that does not fit an int32).
  std::vector<int32_t> special_ids() const;

  static Result<PostProcessor> parse(const JsonEl& json);

 private:
  struct Item {
    bool sequence = false;     // the text itself
    std::vector<int32_t> ids;  // special token ids otherwise
  };
  std::vector<std::vector<Item>> steps_;  // templates applied in order (Sequence)
};

}  // namespace astrai::tok
