// Chat templates are untrusted input (they come with model files): every template renders or fails
// with an error that names the limit it hit (ChatTemplateLimits), quickly and in bounded memory,
// while the renders real templates need stay far inside the limits.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "src/tokenizer/chat_template.h"

namespace {

using astrai::ChatTemplate;
using astrai::ChatTemplateInput;
using astrai::ChatTemplateLimits;

astrai::Result<std::string> render(const std::string& src, const ChatTemplateLimits& limits = {},
                                   const std::string& messages = "[]") {
  auto t = ChatTemplate::parse(src, limits);
  if (!t.ok()) return t.status();
  ChatTemplateInput in;
  in.messages_json = messages;
  return (*t)->render(in);
}

// The render fails, and says which limit it hit.
void require_limit(const astrai::Result<std::string>& r, const std::string& limit) {
  REQUIRE(!r.ok());
  INFO(r.status().message());
  CHECK(r.status().message().find(limit) != std::string::npos);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const std::string kDeepList =
    "{% set ns = namespace(x=[]) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}{% endfor %}";

}  // namespace

TEST_CASE("a value nested 50,000 deep is refused while it is built, whatever walks it", "[unit]") {
  // Each of these used to recurse once per level (printing, tojson, comparing, destroying the value)
  // and overflow the stack.
  for (const std::string tail : {"{{ ns.x|tojson }}", "{{ ns.x }}", "{{ ns.x|string }}", "{{ ns.x == ns.x }}",
                                 "{{ [ns.x] < [ns.x] }}", "{{ ns.x|unique|list }}", ""}) {
    INFO(tail);
    require_limit(render(kDeepList + tail), "max_value_depth = 512");
  }
  // Dicts and tuples count too.
  require_limit(render("{% set ns = namespace(x={}) %}{% for i in range(2000) %}{% set ns.x = {'a': ns.x} %}"
                       "{% endfor %}{{ ns.x|tojson }}"),
                "max_value_depth");
  require_limit(render("{% set ns = namespace(x=()) %}{% for i in range(2000) %}{% set ns.x = (ns.x,) %}"
                       "{% endfor %}{{ ns.x }}"),
                "max_value_depth");
}

TEST_CASE("values up to the depth limit render; the limit is configurable", "[unit]") {
  const std::string deep100 =
      "{% set ns = namespace(x=[]) %}{% for i in range(99) %}{% set ns.x = [ns.x] %}{% endfor %}{{ "
      "ns.x|tojson }}";
  auto ok = render(deep100);
  REQUIRE(ok.ok());
  CHECK(*ok == std::string(100, '[') + std::string(100, ']'));
  ChatTemplateLimits shallow;
  shallow.max_value_depth = 50;
  require_limit(render(deep100, shallow), "max_value_depth = 50");
}

TEST_CASE("messages nested deeper than the limit are an error, not a crash", "[unit]") {
  const std::string deep =
      "[{\"role\": \"user\", \"content\": " + std::string(600, '[') + std::string(600, ']') + "}]";
  auto r = render("{{ messages|tojson }}", {}, deep);
  REQUIRE(!r.ok());
  CHECK(r.status().message().find("messages: value nested too deeply") == 0);
}

TEST_CASE("a namespace that holds itself prints as an error, not endless recursion", "[unit]") {
  for (const std::string tail : {"{{ ns }}", "{{ ns|string }}", "{{ [ns]|tojson }}", "{{ ns == ns }}"}) {
    INFO(tail);
    auto r = render("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}" + tail);
    if (tail == "{{ ns == ns }}") {
      REQUIRE(r.ok());  // identity: no walk
      CHECK(*r == "True");
    } else {
      REQUIRE(!r.ok());
    }
  }
}

TEST_CASE("three nested range(1000) loops stop at the step budget", "[unit]") {
  const auto t0 = std::chrono::steady_clock::now();
  require_limit(render("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
                       "{% endfor %}{% endfor %}{% endfor %}"),
                "max_steps = 5000000");
  CHECK(seconds_since(t0) < 20);  // about half an hour before the budget; well under 1 s idle
  ChatTemplateLimits tight;
  tight.max_steps = 1000;
  require_limit(render("{% for i in range(100) %}{{ i }}{% endfor %}", tight), "max_steps = 1000");
}

TEST_CASE("a string doubled in a loop stops at the output cap", "[unit]") {
  require_limit(render("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}{{ ns.s|length }}"),
                "max_output_bytes");
  require_limit(render("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
                       "{% endfor %}"),
                "max_output_bytes");
  ChatTemplateLimits small;
  small.max_output_bytes = 100;
  require_limit(render("{% for i in range(200) %}x{% endfor %}", small), "max_output_bytes = 100");
  auto ok = render("{% for i in range(100) %}x{% endfor %}", small);
  REQUIRE(ok.ok());
  CHECK(*ok == std::string(100, 'x'));
}

TEST_CASE("templates that multiply memory stop at the memory budget", "[unit]") {
  // Each of these holds far more than 32 MB at once without ever making one long string.
  require_limit(render("{% set s = 'x' * 1000000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                       "{% set ns.l = ns.l + [s ~ i] %}{% endfor %}"),
                "max_memory_bytes");
  require_limit(render("{% set s = 'x' * 1000000 %}{{ (s|list)|length }}"), "max_memory_bytes");
}

TEST_CASE("string work on long strings counts against the step budget", "[unit]") {
  require_limit(render("{% set s = 'x' * 5000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}"
                       "{% endfor %}"),
                "max_steps");
  require_limit(render("{% set s = 'x' * 5000000 %}{% for i in range(100000) %}{{ s.startswith('y') }}"
                       "{% endfor %}"),
                "max_steps");
}

TEST_CASE("the parser is linear: a 200,000-element list and 50,000 nested ifs", "[unit]") {
  std::string list = "{{ [";
  for (int i = 0; i < 200000; ++i) list += i ? ",1" : "1";
  list += "]|length }}";
  ChatTemplateLimits big;
  big.max_source_bytes = list.size();
  big.max_steps = 10'000'000;
  auto t0 = std::chrono::steady_clock::now();
  auto r = render(list, big);
  REQUIRE(r.ok());
  CHECK(*r == "200000");
  CHECK(seconds_since(t0) < 10);  // was > 20 s: every token's column was counted from the line start

  std::string ifs;
  for (int i = 0; i < 50000; ++i) ifs += "{% if true %}";
  ifs += "x";
  for (int i = 0; i < 50000; ++i) ifs += "{% endif %}";
  t0 = std::chrono::steady_clock::now();
  auto p = ChatTemplate::parse(ifs);
  REQUIRE(!p.ok());
  CHECK(p.status().message().find("max_source_bytes") != std::string::npos);
  big.max_source_bytes = ifs.size();
  p = ChatTemplate::parse(ifs, big);
  REQUIRE(!p.ok());
  CHECK(p.status().message().find("nesting too deep") != std::string::npos);
  CHECK(seconds_since(t0) < 10);
}

TEST_CASE("operator chains count as nesting, so the syntax tree stays shallow", "[unit]") {
  for (const char* link :
       {" ~ 1", " + 1", " and 1", " or 1", "|string", ".x", "()", " if 1 else 1", " ** 1"}) {
    std::string src = "{{ 1";
    for (int i = 0; i < 5000; ++i) src += link;
    src += " }}";
    INFO(link);
    auto t = ChatTemplate::parse(src);
    REQUIRE(!t.ok());
    CHECK(t.status().message().find("nesting too deep") != std::string::npos);
  }
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  auto t = ChatTemplate::parse(nots + "1 }}");
  REQUIRE(!t.ok());
  CHECK(t.status().message().find("nesting too deep") != std::string::npos);
  auto ok = render("{{ 1" + std::string(" ~ 1").append(" ~ 1") + " }}");
  REQUIRE(ok.ok());
  CHECK(*ok == "111");
}

TEST_CASE("a long conversation renders well inside the default budget", "[unit]") {
  // A ChatML template over 5,000 messages with tool-call style namespaces and filters.
  std::string messages = "[";
  for (int i = 0; i < 5000; ++i) {
    if (i) messages += ",";
    messages += std::string("{\"role\": \"") + (i % 2 ? "assistant" : "user") +
                "\", \"content\": \"message " + std::to_string(i) + " " + std::string(200, 'x') + "\"}";
  }
  messages += "]";
  const std::string tmpl =
      "{% set ns = namespace(last_user=0) %}{% for m in messages %}{% if m.role == 'user' %}"
      "{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']|trim + "
      "'<|im_end|>' + '\\n' }}{% if loop.index0 == ns.last_user %}{{ {'n': loop.index}|tojson }}{% endif %}"
      "{% endfor %}{{ '<|im_start|>assistant\\n' }}";
  auto r = render(tmpl, {}, messages);
  REQUIRE(r.ok());
  CHECK(r->size() > 5000 * 200);
}

TEST_CASE("recursion is bounded by the stack it uses, not only by counting frames", "[unit]") {
  // Ten list levels around each recursive macro call: within max_call_depth, but under ASan (whose
  // frames are several times larger) it overflowed the stack before the count was reached.
  const std::string deep = "{% macro f(n) %}{{ [[[[[[[[[[f(n+1)]]]]]]]]]] }}{% endmacro %}{{ f(0) }}";
  require_limit(render(deep), "expression nested too deeply");
  ChatTemplateLimits small;
  small.max_stack_bytes = 64 << 10;
  require_limit(render(deep, small), "max_stack_bytes = 65536");
  small.max_call_depth = 100;
  small.max_stack_bytes = size_t(1) << 20;
  require_limit(render(deep, small), "max_call_depth = 100");
}
