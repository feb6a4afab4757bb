// validate_sampling: the one place that owns the engine's ranges. Each case moves one field to just
// inside and just outside its range and checks that exactly that field is named.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>

#include "src/engine/request.h"

using namespace astrai;

namespace {

struct Params {
  SamplingParams s;
  int max_tokens = 16, n = 1;
};

std::optional<ParamError> check(const std::function<void(Params&)>& set, int vocab = 100) {
  Params p;
  set(p);
  return validate_sampling(p.s, p.max_tokens, p.n, vocab);
}

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::nanf("");

}  // namespace

TEST_CASE("default sampling parameters are valid", "[unit]") {
  CHECK_FALSE(validate_sampling(SamplingParams{}, 1, 1, 0));
}

TEST_CASE("each sampling field is accepted at its bounds and rejected just past them", "[unit]") {
  struct Case {
    const char* what;
    std::function<void(Params&)> set;
    std::optional<RequestField> fails;  // nullopt: accepted
  };
  using F = RequestField;
  const Case cases[] = {
      {"max_tokens 1", [](Params& p) { p.max_tokens = 1; }, {}},
      {"max_tokens 0", [](Params& p) { p.max_tokens = 0; }, F::max_tokens},
      {"n 1", [](Params& p) { p.n = 1; }, {}},
      {"n max", [](Params& p) { p.n = kMaxChoices; }, {}},
      {"n 0", [](Params& p) { p.n = 0; }, F::n},
      {"n max+1", [](Params& p) { p.n = kMaxChoices + 1; }, F::n},
      {"temperature 0", [](Params& p) { p.s.temperature = 0; }, {}},
      {"temperature large", [](Params& p) { p.s.temperature = 1e6f; }, {}},
      {"temperature < 0", [](Params& p) { p.s.temperature = -1e-6f; }, F::temperature},
      {"temperature inf", [](Params& p) { p.s.temperature = kInf; }, F::temperature},
      {"temperature nan", [](Params& p) { p.s.temperature = kNaN; }, F::temperature},
      {"top_p 1", [](Params& p) { p.s.top_p = 1; }, {}},
      {"top_p tiny", [](Params& p) { p.s.top_p = 1e-6f; }, {}},
      {"top_p 0", [](Params& p) { p.s.top_p = 0; }, F::top_p},
      {"top_p > 1", [](Params& p) { p.s.top_p = 1.0001f; }, F::top_p},
      {"top_p nan", [](Params& p) { p.s.top_p = kNaN; }, F::top_p},
      {"top_k 0", [](Params& p) { p.s.top_k = 0; }, {}},
      {"top_k large", [](Params& p) { p.s.top_k = 1 << 30; }, {}},
      {"top_k -1", [](Params& p) { p.s.top_k = -1; }, F::top_k},
      {"min_p 0", [](Params& p) { p.s.min_p = 0; }, {}},
      {"min_p 1", [](Params& p) { p.s.min_p = 1; }, {}},
      {"min_p < 0", [](Params& p) { p.s.min_p = -1e-6f; }, F::min_p},
      {"min_p > 1", [](Params& p) { p.s.min_p = 1.0001f; }, F::min_p},
      {"frequency_penalty -100", [](Params& p) { p.s.frequency_penalty = -100; }, {}},
      {"frequency_penalty inf", [](Params& p) { p.s.frequency_penalty = kInf; }, F::frequency_penalty},
      {"presence_penalty 100", [](Params& p) { p.s.presence_penalty = 100; }, {}},
      {"presence_penalty nan", [](Params& p) { p.s.presence_penalty = kNaN; }, F::presence_penalty},
      {"repetition_penalty tiny", [](Params& p) { p.s.repetition_penalty = 1e-6f; }, {}},
      {"repetition_penalty 0", [](Params& p) { p.s.repetition_penalty = 0; }, F::repetition_penalty},
      {"repetition_penalty inf", [](Params& p) { p.s.repetition_penalty = kInf; }, F::repetition_penalty},
      {"top_logprobs 0", [](Params& p) { p.s.top_logprobs = 0; }, {}},
      {"top_logprobs max", [](Params& p) { p.s.top_logprobs = kMaxTopLogprobs; }, {}},
      {"top_logprobs -1", [](Params& p) { p.s.top_logprobs = -1; }, F::top_logprobs},
      {"top_logprobs max+1", [](Params& p) { p.s.top_logprobs = kMaxTopLogprobs + 1; }, F::top_logprobs},
      {"logit_bias first and last token",
       [](Params& p) {
         p.s.logit_bias = {{0, -100.f}, {99, 100.f}};
       },
       {}},
      {"logit_bias token -1",
       [](Params& p) {
         p.s.logit_bias = {{-1, 1.f}};
       },
       F::logit_bias},
      {"logit_bias token = vocab",
       [](Params& p) {
         p.s.logit_bias = {{100, 1.f}};
       },
       F::logit_bias},
      {"logit_bias value inf",
       [](Params& p) {
         p.s.logit_bias = {{5, -kInf}};
       },
       F::logit_bias},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto e = check(c.set);
    if (!c.fails) {
      CHECK_FALSE(e);
      continue;
    }
    REQUIRE(e);
    CHECK(e->field == *c.fails);
    CHECK_FALSE(e->message.empty());
  }
}

TEST_CASE("logit_bias tokens are only checked against a known vocabulary", "[unit]") {
  SamplingParams s;
  s.logit_bias = {{123456, 1.f}};
  CHECK_FALSE(validate_sampling(s, 1, 1, /*vocab_size=*/0));
  const auto e = validate_sampling(s, 1, 1, 1000);
  REQUIRE(e);
  CHECK(e->message == "token 123456 is outside the vocabulary");
}

TEST_CASE("the message says what is wrong without the field name, which the caller adds", "[unit]") {
  SamplingParams s;
  s.top_p = 1.5f;
  const auto e = validate_sampling(s, 1, 1, 0);
  REQUIRE(e);
  CHECK(std::string(request_field_name(e->field)) == "top_p");
  CHECK(e->message == "must be in (0, 1], got 1.5");
  const auto m = validate_sampling(SamplingParams{}, 0, 1, 0);
  REQUIRE(m);
  CHECK(std::string(request_field_name(m->field)) + " " + m->message ==
        "max_tokens must be at least 1, got 0");
}

TEST_CASE("the first failing field in canonical order is reported", "[unit]") {
  SamplingParams s;
  s.top_k = -5;
  s.min_p = 2;
  const auto e = validate_sampling(s, 1, 1, 0);
  REQUIRE(e);
  CHECK(e->field == RequestField::top_k);
}
