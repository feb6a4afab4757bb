#include "src/cli/jsonl.h"

#include <cstdio>
#include <iostream>

#include "src/cli/commands.h"
#include "src/core/json_writer.h"

namespace astrai::cli {

void map_stdin_jsonl(const std::function<Result<std::string>(std::string_view line)>& handler) {
  std::string line;
  size_t line_no = 0;
  bool failed = false;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    Result<std::string> out = handler(line);
    std::string text;
    if (out.ok()) {
      text = std::move(out).value();
    } else {
      failed = true;
      JsonWriter w;
      w.begin_object().key("error").value("line " + std::to_string(line_no) + ": " + out.status().message());
      text = w.end_object().take();
    }
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  std::fflush(stdout);
  set_exit_code(failed ? 1 : 0);
}

}  // namespace astrai::cli
