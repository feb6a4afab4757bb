// Reading a whole file as text (configs, tokenizer files, templates): one helper, one wording of
// its errors.
#pragma once

#include <filesystem>
#include <string>

#include "src/core/status.h"

namespace astrai {

// The file's bytes. Errors: not_found "PATH: no such file", io_error "PATH: cannot read".
Result<std::string> read_text_file(const std::filesystem::path& path);

}  // namespace astrai
