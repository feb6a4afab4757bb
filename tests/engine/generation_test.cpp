// The generation pump over a fake engine: events are pushed into a real RequestState ring (as the
// step loop would), in random batches, and the pump's deltas are checked against the text computed
// independently with std::string::find on the whole output.
#include "src/engine/generation.h"

#include <catch2/catch.hpp>
#include <random>

#include "src/engine/request_state.h"
#include "src/tokenizer/tokenizer.h"

using namespace astrai;

namespace {

constexpr RequestId kId = 7;

// Records what the pump asks of the engine; hands out a Stream over a real RequestState.
struct FakeEngine {
  std::shared_ptr<RequestState> state;
  Request submitted;
  std::vector<RequestId> cancels;
  Status refuse = Status::ok_status();  // when set, submit fails with it
  int64_t window = 1000;

  EnginePort port() {
    return EnginePort{[this](Request r) -> Result<Stream> {
                        if (!refuse.ok()) return refuse;
                        submitted = r;
                        state = std::make_shared<RequestState>(kId, r.n, int(r.prompt.size()), 4096);
                        return Stream(state);
                      },
                      [this](RequestId id) { cancels.push_back(id); }, window};
  }
  void token(int choice, int32_t id) {
    TokenEvent ev;
    ev.token = id;
    ev.choice = choice;
    REQUIRE(state->push(std::move(ev)));
  }
  void finish(int choice, FinishReason why, int32_t token = -1) {
    TokenEvent ev;
    ev.token = token;
    ev.choice = choice;
    ev.finish = why;
    REQUIRE(state->push(std::move(ev)));
  }
};

struct CountingObserver : GenerationObserver {
  int starts = 0, ends = 0, tokens = 0, firsts = 0;
  bool complete = false;
  void on_start() override { ++starts; }
  void on_token(bool first, double since) override {
    ++tokens;
    firsts += first;
    CHECK(since >= 0);
  }
  void on_end(bool c, double) override {
    ++ends;
    complete = c;
  }
};

const Tokenizer& tok() {
  static auto t = Tokenizer::builtin().value();
  return *t;
}

GenerationSpec spec(int n = 1, std::vector<std::string> stop = {}) {
  GenerationSpec s;
  s.prompt = {1, 2, 3};
  s.n = n;
  s.max_tokens = 50;
  s.stop = std::move(stop);
  return s;
}

// Per-choice text and finish reasons, pumping after a random number of pushed events.
struct Collected {
  std::vector<std::string> text;
  std::vector<FinishReason> finish;
  std::vector<std::string> stop_string;
  int deltas = 0;
};

void collect(Generation& g, std::vector<ChoiceDelta>& ds, Collected& c) {
  ds.clear();
  g.pump(ds);
  for (const auto& d : ds) {
    ++c.deltas;
    REQUIRE(d.choice < int(c.text.size()));
    REQUIRE(c.finish[size_t(d.choice)] == FinishReason::none);  // nothing after a choice's last delta
    c.text[size_t(d.choice)] += d.text;
    if (d.finish != FinishReason::none) {
      c.finish[size_t(d.choice)] = d.finish;
      c.stop_string[size_t(d.choice)] = d.stop_string;
    }
  }
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += len;
  }
  return true;
}

}  // namespace

TEST_CASE("the pump trims stop strings that straddle tokens, whatever the event batching", "[unit]") {
  const std::vector<std::string> texts = {"hello world, STOP here", "déjà vu € ST", "no stop at all 😀",
                                          "STOPSTOP", "caf\xc3\xa9 ENDING end"};
  const std::vector<std::string> stops = {"STOP", "END", "\xc3\xa9 E"};
  std::mt19937 rng(1234);
  for (int rep = 0; rep < 20; ++rep) {
    for (const auto& text : texts) {
      INFO(text);
      FakeEngine fe;
      auto g = Generation::start(fe.port(), tok(), spec(1, stops), [] {}).value();
      const auto ids = tok().encode(text, false);
      // Independent reference: the earliest-ending stop string in the whole text.
      size_t cut = std::string::npos, best_end = std::string::npos;
      for (const auto& s : stops) {
        const size_t at = text.find(s);
        if (at != std::string::npos &&
            (at + s.size() < best_end || (at + s.size() == best_end && at < cut))) {
          cut = at;
          best_end = at + s.size();
        }
      }
      Collected c{{""}, {FinishReason::none}, {""}};
      std::vector<ChoiceDelta> ds;
      size_t i = 0;
      while (i < ids.size()) {
        const size_t batch = 1 + rng() % 4;
        for (size_t k = 0; k < batch && i < ids.size(); ++k) fe.token(0, ids[i++]);
        collect(*g, ds, c);
        for (const auto& d : ds) CHECK(valid_utf8(d.text));
        if (g->finished()) break;
      }
      if (!g->finished()) {
        fe.finish(0, FinishReason::length);
        collect(*g, ds, c);
      }
      REQUIRE(g->finished());
      if (cut == std::string::npos) {
        CHECK(c.text[0] == text);
        CHECK(c.finish[0] == FinishReason::length);
        CHECK(fe.cancels.empty());  // the engine finished the request itself
      } else {
        CHECK(c.text[0] == text.substr(0, cut));
        CHECK(c.finish[0] == FinishReason::stop);
        CHECK(c.stop_string[0] == text.substr(cut, best_end - cut));
        CHECK(fe.cancels == std::vector<RequestId>{kId});  // we ended it: the engine must stop
      }
    }
  }
}

TEST_CASE("n > 1: choices are pumped independently and the request ends when all have", "[unit]") {
  FakeEngine fe;
  CountingObserver obs;
  auto g = Generation::start(
               fe.port(), tok(), spec(3, {"XY"}), [] {}, &obs)
               .value();
  CHECK(fe.submitted.n == 3);
  CHECK(g->n() == 3);
  const auto a = tok().encode("abXYcd", false), b = tok().encode("abc", false), c = tok().encode("zz", false);
  Collected got{{"", "", ""}, {FinishReason::none, FinishReason::none, FinishReason::none}, {"", "", ""}};
  std::vector<ChoiceDelta> ds;
  // Interleaved, as the step loop produces them: one token per choice per step.
  for (size_t step = 0; step < a.size(); ++step) {
    fe.token(0, a[step]);
    if (step < b.size()) fe.token(1, b[step]);
    if (step < c.size()) fe.token(2, c[step]);
    if (step + 1 == c.size()) fe.finish(2, FinishReason::stop);  // eos
    collect(*g, ds, got);
  }
  CHECK(got.text[0] == "ab");
  CHECK(got.finish[0] == FinishReason::stop);
  CHECK(got.text[2] == "zz");
  CHECK(got.finish[2] == FinishReason::stop);
  CHECK(got.stop_string[2].empty());
  CHECK_FALSE(g->finished());  // choice 1 is still running
  CHECK(fe.cancels.empty());
  fe.finish(1, FinishReason::length, tok().encode("d", false)[0]);
  collect(*g, ds, got);
  CHECK(g->finished());
  CHECK(got.text[1] == "abcd");
  CHECK(got.finish[1] == FinishReason::length);
  CHECK(g->completion_tokens(0) == 4);  // a, b, X, Y: the stop string's tokens count
  CHECK(g->completion_tokens(1) == 4);
  CHECK(g->completion_tokens(2) == 2);
  CHECK(g->completion_tokens() == 10);
  CHECK(g->prompt_tokens() == 3);
  // Choice 0's engine-side finish was never consumed: the pump cancels what is left.
  CHECK(fe.cancels == std::vector<RequestId>{kId});
  g.reset();
  CHECK(obs.starts == 1);
  CHECK(obs.ends == 1);
  CHECK(obs.complete);
  CHECK(obs.tokens == 10);
  CHECK(obs.firsts == 1);
}

TEST_CASE("a refused submit reports nothing and cancels nothing (active_generations stays balanced)",
          "[unit]") {
  FakeEngine fe;
  fe.refuse = resource_exhausted("the request queue is full (4 waiting); retry later");
  CountingObserver obs;
  auto g = Generation::start(
      fe.port(), tok(), spec(), [] {}, &obs);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().code() == ErrorCode::resource_exhausted);
  CHECK(obs.starts == 0);
  CHECK(obs.ends == 0);
  CHECK(fe.cancels.empty());
}

TEST_CASE("a generation dropped while running cancels once and reports an incomplete end", "[unit]") {
  FakeEngine fe;
  CountingObserver obs;
  auto g = Generation::start(
               fe.port(), tok(), spec(), [] {}, &obs)
               .value();
  fe.token(0, tok().encode("a", false)[0]);
  std::vector<ChoiceDelta> ds;
  CHECK_FALSE(g->pump(ds));
  g->cancel();
  g->cancel();
  g.reset();
  CHECK(fe.cancels == std::vector<RequestId>{kId});
  CHECK(obs.starts == 1);
  CHECK(obs.ends == 1);
  CHECK_FALSE(obs.complete);
}

TEST_CASE("max_tokens is capped to the context window, and a prompt that fills it is refused", "[unit]") {
  FakeEngine fe;
  fe.window = 10;
  auto s = spec();
  s.max_tokens = 100;
  REQUIRE(Generation::start(fe.port(), tok(), s, [] {}).ok());
  CHECK(fe.submitted.max_tokens == 7);
  s.max_tokens = 0;  // the rest of the window
  REQUIRE(Generation::start(fe.port(), tok(), s, [] {}).ok());
  CHECK(fe.submitted.max_tokens == 7);
  s.max_tokens = 2;
  s.stop_ids = {42};
  s.ignore_eos = true;
  REQUIRE(Generation::start(fe.port(), tok(), s, [] {}).ok());
  CHECK(fe.submitted.max_tokens == 2);
  CHECK(fe.submitted.stop_ids == std::vector<int32_t>{42});
  CHECK(fe.submitted.ignore_eos);
  s.prompt.assign(10, 1);
  auto full = Generation::start(fe.port(), tok(), s, [] {});
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().code() == ErrorCode::invalid_argument);
  s.prompt.clear();
  CHECK(Generation::start(fe.port(), tok(), s, [] {}).status().code() == ErrorCode::invalid_argument);
}

TEST_CASE("engine errors end the choice with their message", "[unit]") {
  FakeEngine fe;
  auto g = Generation::start(fe.port(), tok(), spec(), [] {}).value();
  TokenEvent ev;
  ev.finish = FinishReason::error;
  ev.error = "backend failed";
  REQUIRE(fe.state->push(ev));
  std::vector<ChoiceDelta> ds;
  CHECK(g->pump(ds));
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].finish == FinishReason::error);
  CHECK(ds[0].error == "backend failed");
  CHECK(fe.cancels.empty());
}

// Several prompts (a completions request with a list of them): an engine request each.
TEST_CASE("several prompts: a request each, choices prompt-major, usage summed, refusals taken back",
          "[unit]") {
  std::vector<std::shared_ptr<RequestState>> states;
  std::vector<Request> submitted;
  std::vector<RequestId> cancels;
  size_t refuse_at = 100;  // the submit with this index fails
  EnginePort port{[&](Request r) -> Result<Stream> {
                    if (states.size() == refuse_at) return resource_exhausted("the request queue is full");
                    const RequestId id = 100 + RequestId(states.size());
                    states.push_back(std::make_shared<RequestState>(id, r.n, int(r.prompt.size()), 4096));
                    submitted.push_back(std::move(r));
                    return Stream(states.back());
                  },
                  [&](RequestId id) { cancels.push_back(id); }, 1000};
  auto s = spec(2, {"XY"});
  s.more_prompts = {{4, 5}, {6}};
  s.prompt_logprobs = 1;
  auto push = [&](size_t p, int choice, int32_t token, FinishReason f = FinishReason::none,
                  bool prompt = false) {
    TokenEvent ev;
    ev.token = token;
    ev.choice = choice;
    ev.finish = f;
    ev.prompt = prompt;
    ev.logprob = -float(token);
    const bool pushed = states[p]->push(std::move(ev));
    REQUIRE(pushed);
  };

  SECTION("choices and usage") {
    CountingObserver obs;
    auto g = Generation::start(
                 port, tok(), s, [] {}, &obs)
                 .value();
    REQUIRE(submitted.size() == 3);
    CHECK(submitted[1].prompt == std::vector<int32_t>{4, 5});
    CHECK(submitted[2].prompt == std::vector<int32_t>{6});
    for (const auto& r : submitted) {
      CHECK(r.n == 2);
      CHECK(r.max_tokens == 50);
      CHECK(r.prompt_logprobs == 1);
    }
    CHECK(g->n() == 6);
    CHECK(g->prompts() == 3);
    CHECK(g->prompt_of(3) == 1);
    CHECK(g->prompt_tokens() == 6);
    // Prompt logprobs land with their prompt; tokens with prompt p's choice p * 2 + j.
    push(1, 0, 5, FinishReason::none, /*prompt=*/true);
    const auto a = tok().encode("ab", false), xy = tok().encode("XY", false);
    push(2, 1, a[0]);
    push(1, 0, a[0]);
    push(1, 1, xy[0]);
    push(1, 1, xy[1]);  // choice 3 meets its stop string
    push(1, 0, a[1], FinishReason::length);
    Collected got{std::vector<std::string>(6), std::vector<FinishReason>(6, FinishReason::none),
                  std::vector<std::string>(6)};
    std::vector<ChoiceDelta> ds;
    collect(*g, ds, got);
    REQUIRE(g->prompt_logprobs(1).size() == 1);
    CHECK(g->prompt_logprobs(1)[0].id == 5);
    CHECK(g->prompt_logprobs(0).empty());
    CHECK(got.text[5] == "a");
    CHECK(got.text[2] == "ab");
    CHECK(got.finish[2] == FinishReason::length);
    CHECK(got.finish[3] == FinishReason::stop);
    CHECK(got.stop_string[3] == "XY");
    // Prompt 1's choices are over on our side: its request (only) is cancelled.
    CHECK(cancels == std::vector<RequestId>{101});
    CHECK_FALSE(g->finished());
    for (size_t p : {size_t(0), size_t(2)})
      for (int c = 0; c < 2; ++c) push(p, c, -1, FinishReason::stop);
    collect(*g, ds, got);
    CHECK(g->finished());
    CHECK(g->completion_tokens() == 5);
    g.reset();
    CHECK(cancels == std::vector<RequestId>{101});  // the others ended in the engine
    CHECK(obs.starts == 1);
    CHECK(obs.ends == 1);
    CHECK(obs.complete);
    CHECK(obs.firsts == 1);
  }
  SECTION("a refused submit takes back the prompts already submitted and reports nothing") {
    refuse_at = 2;
    CountingObserver obs;
    auto g = Generation::start(
        port, tok(), s, [] {}, &obs);
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().code() == ErrorCode::resource_exhausted);
    CHECK(cancels == std::vector<RequestId>{100, 101});
    CHECK(obs.starts == 0);
    CHECK(obs.ends == 0);
  }
  SECTION("a prompt past the context window is refused before anything is submitted") {
    s.more_prompts[1].assign(1000, 7);
    auto g = Generation::start(port, tok(), s, [] {});
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().code() == ErrorCode::invalid_argument);
    CHECK(g.status().message().find("prompt 2 has 1000 tokens") != std::string::npos);
    CHECK(submitted.empty());
    s.more_prompts[1].clear();
    CHECK(Generation::start(port, tok(), s, [] {}).status().message() == "prompt 2 is empty");
  }
}
