// Token ids in tokenizer files are untrusted: an id beyond any real vocabulary, a post-processor or
// eos id outside the vocabulary, or an id the model cannot embed is refused at load with an error
// naming the file and the entry (an added token with id 1,000,000,000 used to cost 1 GB).
#include <catch2/catch.hpp>
#include <string>

#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

namespace {

using astrai::Tokenizer;

// The built-in tokenizer.json with its first added token (<|endoftext|>, id 256) given another id.
std::string with_added_id(const std::string& id) {
  std::string j = astrai::builtin_tokenizer_json();
  const std::string from = "\"id\":256,";
  const size_t at = j.find(from);
  REQUIRE(at != std::string::npos);
  return j.replace(at, from.size(), "\"id\":" + id + ",");
}

void require_error(const astrai::Status& s, const std::string& part) {
  REQUIRE(!s.ok());
  INFO(s.message());
  CHECK(s.message().find(part) != std::string::npos);
}

}  // namespace

TEST_CASE("an added token id beyond any real vocabulary is refused naming the token", "[unit]") {
  for (const std::string id : {"1000000000", "4194304", "2147483648", "9223372036854775807"}) {
    INFO(id);
    auto t = Tokenizer::from_json(with_added_id(id));
    require_error(t.status(), "tokenizer.json: added_tokens: '<|endoftext|>' has id " + id);
  }
  auto ok = Tokenizer::from_json(with_added_id("400"));
  REQUIRE(ok.ok());
  CHECK((*ok)->vocab_size() == 401);
}

TEST_CASE("a vocabulary id beyond any real vocabulary, or a sparse vocabulary, is refused", "[unit]") {
  std::string j = astrai::builtin_tokenizer_json();
  const size_t at = j.find("\"vocab\":{");
  REQUIRE(at != std::string::npos);
  std::string huge = j, sparse = j;
  huge.insert(at + 9, "\"zz\":1000000000,");
  require_error(Tokenizer::from_json(huge).status(), "model.vocab: 'zz' has id 1000000000");
  sparse.insert(at + 9, "\"zz\":100000,");
  require_error(Tokenizer::from_json(sparse).status(), "model.vocab: ids reach 100000 with only");
}

TEST_CASE("post-processor and eos ids outside the vocabulary are refused", "[unit]") {
  std::string j = astrai::builtin_tokenizer_json();
  const size_t at = j.find("\"post_processor\":{");
  REQUIRE(at != std::string::npos);
  j.replace(
      at, j.find('}', at) + 1 - at,
      "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
      "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":"
      "{\"id\":\"<s>\",\"ids\":[5000000000],\"tokens\":[\"<s>\"]}}}");
  require_error(Tokenizer::from_json(j).status(),
                "post_processor: special token id -1 is outside the vocabulary");
  auto gen =
      Tokenizer::from_json(astrai::builtin_tokenizer_json(), "", "{\"eos_token_id\": [257, 10000000000]}");
  require_error(gen.status(), "generation_config.json: eos_token_id 10000000000 is not a valid token id");
}

TEST_CASE("Tokenizer::load refuses ids the model in the same directory cannot embed", "[unit]") {
  astrai::test::TempDir dir("tokids");
  astrai::test::write_file(dir / "tokenizer.json", with_added_id("400"));
  REQUIRE(Tokenizer::load(dir.path()).ok());  // no config.json: nothing to check against
  astrai::test::write_file(dir / "config.json", "{\"vocab_size\": 320}");
  auto t = Tokenizer::load(dir.path());
  require_error(t.status(),
                "/tokenizer.json: token '<|endoftext|>' has id 400, which is outside the model's "
                "vocabulary (" +
                    (dir / "config.json").string() + " vocab_size = 320)");
  astrai::test::write_file(dir / "config.json", "{\"text_config\": {\"vocab_size\": 320}}");
  require_error(Tokenizer::load(dir.path()).status(), "vocab_size = 320");
  astrai::test::write_file(dir / "config.json", "{\"vocab_size\": 401}");
  REQUIRE(Tokenizer::load(dir.path()).ok());
  astrai::test::write_file(dir / "generation_config.json", "{\"eos_token_id\": 401}");
  require_error(Tokenizer::load(dir.path()).status(), "generation_config.json: eos_token_id 401 is outside");
}
