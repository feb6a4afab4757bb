// Tokenizer::load / from_json / builtin / load_or_preset.
#include <fstream>
#include <sstream>

#include "src/tokenizer/hf_tokenizer.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {
namespace {

Result<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return io_error(p.string() + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error(p.string() + ": read failed");
  return ss.str();
}

// Prefixes a Status message with the file it is about, unless it names one already.
Status in_file(const Status& s, const std::filesystem::path& p) {
  return Status(s.code(), p.parent_path().string() + "/" + s.message());
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json,
                                                        std::string_view generation_config_json) {
  ASTRAI_ASSIGN_OR_RETURN(
      auto t, tok::HfTokenizer::create(tokenizer_json, tokenizer_config_json, generation_config_json));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json) {
  return from_json(tokenizer_json, tokenizer_config_json, {});
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::filesystem::path& dir) {
  const auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj))
    return not_found(tj.string() + ": not found (the model directory needs a tokenizer.json)");
  ASTRAI_ASSIGN_OR_RETURN(std::string tokenizer_json, read_text(tj));
  std::string config, generation;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    ASTRAI_ASSIGN_OR_RETURN(config, read_text(dir / "tokenizer_config.json"));
  }
  if (std::filesystem::exists(dir / "generation_config.json")) {
    ASTRAI_ASSIGN_OR_RETURN(generation, read_text(dir / "generation_config.json"));
  }
  auto t = from_json(tokenizer_json, config, generation);
  if (!t.ok()) return in_file(t.status(), tj);
  return t;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::builtin() {
  return from_json(builtin_tokenizer_json(), builtin_tokenizer_config_json());
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_or_preset(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return load(model);
  for (const char* preset : {"tiny", "llama-1b", "qwen3-0.6b", "qwen3-8b"})
    if (model == preset) return builtin();
  return not_found("--model " + model +
                   ": not a directory and not a preset name (tiny, llama-1b, qwen3-0.6b, qwen3-8b)");
}

}  // namespace astrai
