// The stdin-JSONL-to-stdout loop shared by tokenize, detokenize and template: one output line per
// non-blank input line, in order. A line whose handler fails prints {"error": "line N: ..."} and the
// run goes on; the exit code is set to 1 at the end if any line failed.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "src/core/status.h"

namespace astrai::cli {

// handler(line) returns the output JSON text for the line, or a Status whose message is reported.
void map_stdin_jsonl(const std::function<Result<std::string>(std::string_view line)>& handler);

}  // namespace astrai::cli
