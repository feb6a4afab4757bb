// The server's metrics as the generation pump's observer.
#include "net/server_metrics.h"

#include <catch2/catch.hpp>

#include "src/engine/request_state.h"
#include "src/tokenizer/tokenizer.h"

using namespace astrai;
using namespace astrai::net;

namespace {

EnginePort refusing_engine(int& cancels) {
  return EnginePort{[](Request) -> Result<Stream> { return resource_exhausted("the request queue is full"); },
                    [&cancels](RequestId) { ++cancels; }, 1000};
}

}  // namespace

TEST_CASE("queue-full 503s leave active_generations at zero (issue 12)", "[unit]") {
  auto tok = Tokenizer::builtin().value();
  ServerMetrics m;
  int cancels = 0;
  GenerationSpec spec;
  spec.prompt = {1, 2, 3};
  for (int i = 0; i < 5; ++i) {
    auto g = Generation::start(
        refusing_engine(cancels), *tok, spec, [] {}, &m);
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().code() == ErrorCode::resource_exhausted);
  }
  CHECK(m.active_generations.load() == 0);
  CHECK(cancels == 0);  // nothing was submitted, so nothing is cancelled
}

TEST_CASE("a generation counts as active from submit to its end, and feeds the latency histograms",
          "[unit]") {
  auto tok = Tokenizer::builtin().value();
  ServerMetrics m;
  std::shared_ptr<RequestState> state;
  EnginePort port{[&](Request r) -> Result<Stream> {
                    state = std::make_shared<RequestState>(1, r.n, int(r.prompt.size()), 64);
                    return Stream(state);
                  },
                  [](RequestId) {}, 1000};
  GenerationSpec spec;
  spec.prompt = {1, 2, 3};
  auto g = Generation::start(
               port, *tok, spec, [] {}, &m)
               .value();
  CHECK(m.active_generations.load() == 1);
  for (int32_t t : tok->encode("hi", false)) {
    TokenEvent ev;
    ev.token = t;
    REQUIRE(state->push(ev));
  }
  TokenEvent end;
  end.finish = FinishReason::stop;
  REQUIRE(state->push(end));
  std::vector<ChoiceDelta> ds;
  CHECK(g->pump(ds));
  g.reset();
  CHECK(m.active_generations.load() == 0);
  CHECK(m.streamed_tokens.load() == 2);
  CHECK(m.ttft.count() == 1);
  CHECK(m.itl.count() == 1);
  CHECK(m.e2e.count() == 1);
}
