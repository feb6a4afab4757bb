// Jinja lexer: splits a template into text and tag tokens the way jinja2's lexer does with
// trim_blocks and lstrip_blocks on, so whitespace comes out byte-identical:
//  - newlines (\r\n, \r, \n) become \n and one trailing newline of the template is dropped;
//  - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all after it;
//  - trim_blocks: the first newline after `%}` or `#}` is removed;
//  - lstrip_blocks: spaces/tabs from the start of a line up to `{%` or `{#` are removed
//    (not before `{{`, not with `{%+`).
// Expression tokens inside tags are names, literals and operators; comments produce nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"

namespace astrai::jinja {

enum class Tok : uint8_t {
  text,
  var_begin,
  var_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op,
  eof
};

struct Token {
  Tok type = Tok::eof;
  std::string value;  // text, name, operator spelling, or the unescaped string literal
  int64_t ival = 0;
  double fval = 0;
  int line = 1, col = 1;
};

// "chat template: <what> at line L, column C" errors carry positions in these units: lines from 1,
// columns in code points from 1.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace astrai::jinja
