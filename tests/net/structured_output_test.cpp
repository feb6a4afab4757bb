// Structured output end to end: the server's response_format / guided_regex fields, sampled outputs
// validated with ajv (tests/net/structured_output.mjs).
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
