// What one chat template may cost. Templates come from model files, which are untrusted input:
// with these limits any template parses and renders, or fails with an error naming the limit, in
// well under a second and 64 MB (measured in docs/reliability.md). The defaults leave real
// templates (a few KB, a few thousand steps per message) far below every limit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace astrai {

struct ChatTemplateLimits {
  // Parsing.
  size_t max_source_bytes = size_t(128) << 10;  // template text (real ones are 0.3-20 KB)
  int max_nesting = 256;  // nested blocks, brackets and operator chains (`a ~ b ~ ...` counts each `~`)
  // Rendering.
  uint64_t max_steps = 5'000'000;             // statements, expressions, loop iterations and elements touched
  size_t max_output_bytes = size_t(8) << 20;  // the rendered text, and any one string a template builds
  size_t max_memory_bytes = size_t(32) << 20;  // strings, lists and dicts the render holds at once
  int max_value_depth = 512;  // nesting of lists/dicts, in the input messages and built at run time
  int max_call_depth = 1500;  // nested expression evaluation, macro calls included
  // Stack the interpreter's recursion may use, measured (frame sizes differ between builds: ASan's
  // are several times larger). A render needs this plus about 1 MiB (value walks, the caller).
  size_t max_stack_bytes = size_t(1) << 20;
};

}  // namespace astrai
