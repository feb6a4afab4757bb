// `astrai generate` lines take the server's structured-output fields: sampled outputs (temperature
// 1, tiny model) match their constraint, and a bad schema is that line's error.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "src/structured/json_schema.h"
#include "src/structured/matcher.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::structured;

namespace {

bool matches(Grammar g, const std::string& text) {
  GrammarDfa d(std::move(g));
  int32_t s = d.start();
  for (char c : text) s = d.step(s, uint8_t(c));
  return s != GrammarDfa::kDead && d.accepts(s);
}

}  // namespace

TEST_CASE("astrai generate: response_format and guided_regex lines are constrained, bad schemas are errors",
          "[structured]") {
  test::TempDir dir("structured");
  const std::string schema =
      R"({"type":"object","properties":{"k":{"enum":["a","b"]},"n":{"type":"integer","minimum":1,"maximum":500},)"
      R"("s":{"type":"string","maxLength":5}},"required":["k","n","s"],"additionalProperties":false})";
  std::string in;
  for (int i = 0; i < 6; ++i)
    in +=
        R"({"id":)" + std::to_string(i) +
        R"(,"prompt":"x","n":2,"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":)" +
        schema + "}}}\n";
  in += R"({"id":"re","prompt":"y","n":3,"guided_regex":"(ab|c)+-[0-9]{2}"})"
        "\n";
  in +=
      R"({"id":"bad","prompt":"z","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"strin"}}}})"
      "\n";
  test::write_file(dir / "in.jsonl", in);
  const auto r = test::run_command(test::astrai_bin() + " generate --model tiny --temperature 1 --seed " +
                                   std::to_string(test::fresh_seed() % 1000000) + " --input " +
                                   (dir / "in.jsonl").string() + " --output " + (dir / "out.jsonl").string());
  INFO(r.err);
  REQUIRE(r.exit_code != -1);
  const std::string out = test::read_file(dir / "out.jsonl");
  simdjson::dom::parser p;
  int lines = 0, texts = 0;
  for (size_t pos = 0, nl; (nl = out.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    const std::string line = out.substr(pos, nl - pos);
    INFO(line);
    simdjson::dom::element e = p.parse(line);
    ++lines;
    std::string_view id_str;
    if (!e["id"].get_string().get(id_str) && id_str == "bad") {
      CHECK(std::string(e["error"].get_string().value())
                .find("'response_format.json_schema.schema.type': unknown type") != std::string::npos);
      continue;
    }
    const bool regex = !e["id"].get_string().error();
    for (simdjson::dom::element t : e["texts"].get_array()) {
      Grammar g;
      REQUIRE((regex ? compile_regex("(ab|c)+-[0-9]{2}", g) : compile_json_schema(schema, g)).empty());
      CHECK(matches(std::move(g), std::string(t.get_string().value())));
      ++texts;
    }
    for (simdjson::dom::element f : e["finish_reasons"].get_array()) CHECK(f.get_string().value() == "stop");
  }
  CHECK(lines == 8);
  CHECK(texts == 6 * 2 + 3);
}
