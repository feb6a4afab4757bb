// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence.
#pragma once

#include <memory>
#include <string>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"

namespace astrai::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual std::string normalize(std::string text) const = 0;
};

// Null JSON gives nullptr (no normalizer). An unknown type is an error naming it.
Result<std::unique_ptr<Normalizer>> parse_normalizer(const JsonEl& json);

}  // namespace astrai::tok
