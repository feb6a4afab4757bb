// Structured output end to end: the server's response_format / text.format / guided_regex fields,
// sampled outputs validated with ajv, and the openai and Vercel AI SDKs with zod schemas
// (tests/net/structured_output.mjs), on the random-weight tiny model and on the trained models/brown.
#include <catch2/catch.hpp>

#include "net/shared_server.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {
void node_script(const std::vector<std::string>& args) {
  std::string out;
  const int rc = run_node("structured_output.mjs", args, out);
  INFO(out);
  CHECK(rc == 0);
}
}  // namespace

TEST_CASE("structured output: 5 sampled outputs under each of 20 JSON schemas validate, regex, zod, 400s",
          "[integration]") {
  node_script({shared_server().url(), "5"});
}

TEST_CASE("structured output: 1,000 sampled outputs under 20 JSON schemas all validate with ajv", "[slow]") {
  ServerProcess s({"--max-concurrent", "400", "--max-batch-size", "256", "--access-log", "false"});
  node_script({s.url(), "50"});
  CHECK(s.terminate() == 0);
}

// A trained model puts its probability on English-looking bytes, not spread over the vocabulary as
// the random-weight model does: the masks must still lead every output to a valid end.
TEST_CASE(
    "structured output on the trained model (models/brown): 1,000 outputs under 20 schemas validate, SDKs",
    "[slow]") {
  ServerProcess s({"--model", (source_dir() / "models/brown").string(), "--max-concurrent", "400",
                   "--max-batch-size", "256", "--access-log", "false"},
                  false);
  node_script({s.url(), "50"});
  CHECK(s.terminate() == 0);
}
