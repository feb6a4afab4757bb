// Real clients against the real server: the official openai and @anthropic-ai/sdk packages, a `ws`
// WebSocket client, headless Chromium on the chat page, a 200-stream load with disconnects, and the
// chaos run (1,000 streams over SSE and WebSocket, a fifth of them ending early).
#include <catch2/catch.hpp>

#include "net/shared_server.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {
void node_script(const std::string& script, const std::vector<std::string>& args) {
  std::string out;
  const int rc = run_node(script, args, out);
  INFO(out);
  CHECK(rc == 0);
}
}  // namespace

TEST_CASE("the openai SDK: chat, streaming, completions, stop, max_tokens, logprobs, tools, errors",
          "[integration]") {
  node_script("openai_client.mjs", {shared_server().url()});
}

TEST_CASE("the Anthropic SDK: messages, streaming events, stop_sequences, tools, count_tokens, errors",
          "[integration]") {
  node_script("anthropic_client.mjs", {shared_server().url()});
}

TEST_CASE("the openai SDK's Responses API: create, stream events, input items, unsupported fields",
          "[integration]") {
  node_script("responses_client.mjs", {shared_server().url()});
}

TEST_CASE("one WebSocket multiplexes three generations and cancels one", "[integration]") {
  node_script("ws_client.mjs", {shared_server().url()});
}

TEST_CASE("the chat page streams a reply in headless Chromium", "[integration]") {
  node_script("chat_page.mjs", {shared_server().url()});
}

TEST_CASE("the dashboard draws live /stats figures in headless Chromium while a load runs", "[integration]") {
  node_script("dashboard.mjs", {shared_server().url()});
}

TEST_CASE("200 concurrent SSE streams, 50 disconnecting early, leave no request or KV page behind",
          "[slow]") {
  ServerProcess s({"--max-concurrent", "400", "--max-batch-size", "256", "--access-log", "false"});
  node_script("load_streams.mjs", {s.url(), "200", "50"});
  CHECK(s.terminate() == 0);
}

TEST_CASE(
    "chaos: 1,000 streams over SSE and WebSocket, 20% ending early at random points, twice: the engine idle, "
    "a flush empties the cache, memory steady",
    "[slow]") {
  ServerProcess s({"--max-concurrent", "4000", "--max-batch-size", "256", "--max-queue", "8192",
                   "--access-log", "false"});
  node_script("chaos_streams.mjs", {s.url(), "1000", "0.2", std::to_string(s.pid())});
  CHECK(s.terminate() == 0);
}
