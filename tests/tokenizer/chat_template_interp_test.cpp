// The Jinja interpreter on small templates, each compared with Python's jinja2 (set up as
// transformers does): whitespace control, loops, filters, tests, slicing, value semantics, errors.
#include <catch2/catch.hpp>

#include "chat_template_reference.h"
#include "src/tokenizer/chat_template.h"

using astrai::test::TemplateCase;

namespace {

TemplateCase T(std::string tmpl, std::string extra = "", std::string messages = "[]") {
  TemplateCase c;
  c.name = tmpl.substr(0, 60);
  c.tmpl = std::move(tmpl);
  c.extra_json = std::move(extra);
  c.messages_json = std::move(messages);
  return c;
}

}  // namespace

TEST_CASE("whitespace control, trim_blocks and lstrip_blocks match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("a\n{% if true %}\nb\n{% endif %}\nc\n"),
      T("a\n  {% if true %}\n  b\n  {% endif %}\n  c"),
      T("a  {%- if true -%}  b  {%- endif -%}  c"),
      T("a\n\t {%+ if true %}x{% endif %}\n"),
      T("  {{ 'x' }}  \n  {{- 'y' -}}  \n z"),
      T("{# comment #}\nline\n   {# indented comment #}\nnext {#- strip -#}   end"),
      T("a\r\nb\rc\n{% if true %}\r\nd{% endif %}\n\n"),
      T("x {% raw %}{{ not rendered }}{% endraw %}\n y"),
      T("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n"),
      T("{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor -%}\n"),
      T("   {% set x = 1 %}   \n{{ x }}"),
      T("a {% if true %} b {% endif %} c"),
      T("{{ '{{' }} {{ {'a': {'b': 1}} }} {{ \"}}\" }}"),
      T("\n\n{% if true %}  \n\n{% endif %}\n\n"),
      T("  \u3000{% if true %}x{% endif %}"),
      T("x\n    {%- if true %}\n    y\n    {%- endif %}\n"),
      T("{%- macro m(a) -%}\n  [{{ a }}]\n{%- endmacro -%}\n{{ m(1) }}\n{{ m(2) }}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("loops: loop variable, else, filters, unpacking, break and continue match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
        "{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
        R"({"xs": ["a", "b", "c"]})"),
      T("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", R"({"xs": []})"),
      T("{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}:{{ loop.last }} {% endfor %}",
        R"({"xs": [1, 2, 3, 1, 5]})"),
      T("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
        R"({"d": {"b": 1, "a": [1, 2], "c": null}})"),
      T("{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}",
        R"({"d": {"x": 1, "y": 2}})"),
      T("{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
      T("{% for c in 'héllo' %}{{ c }}-{% endfor %}"),
      T("{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% "
        "endif %}"
        "{{ x }}{% endfor %}"),
      T("{% for x in [1, 2] %}{% for y in [3, 4] %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{% endfor %}"),
      T("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"),
      T("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
        "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
      T("{% for x in xs %}{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }} {{ loop.cycle('o', 'e') }}|{% "
        "endfor %}",
        R"({"xs": [1, 2, 3]})"),
      T("{% for x in none_value %}{{ x }}{% endfor %}", R"({"none_value": null})"),
      T("{% for x in missing %}{{ x }}{% else %}nothing{% endfor %}"),
      T("{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}"),
      T("{% for x in [3, 1, 2]|sort %}{{ x }}{% endfor %}{% for x in [3, 1, 2]|reverse %}{{ x }}{% endfor "
        "%}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("set, macros, with, filter blocks and scoping match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}"),
      T("{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}shout{% endset %}{{ y }}"),
      T("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} "
        "{{ greet('b', '?') }} {{ greet(punct='.', name='c') }} {{ greet() }}"),
      T("{% set g = 'outer' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'later' %}{{ m() }}"),
      T("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ "
        "fact(5) }}"),
      T("{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]"),
      T("{% filter upper %}abc {{ 'def' }}{% endfilter %}"),
      T("{% if true %}{% set inside = 1 %}{% endif %}{{ inside }}"),
      T("{% for i in range(2) %}{% set loop_local = i %}{% endfor %}[{{ loop_local }}]"),
      T("{% set d = {'a': 1, 'b': [1, 2]} %}{{ d }} {{ d.a }} {{ d['b'][1] }} {{ d.get('c', 'dflt') }} {{ "
        "d.get('z') }}"),
      T("{% set j = joiner(', ') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}"),
      T("{% generation %}gen {{ 1 }}{% endgeneration %}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("filters match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("[{{ '  x y \\n'|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ 'Hello'|length }} {{ [1, 2]|length }} {{ "
        "{}|count }}"),
      T("{{ missing|default('d') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|d('n', "
        "boolean=true) }} "
        "{{ 0|default(5) }}"),
      T("{{ 'MiXed ÉtÉ'|lower }} {{ 'mixed été'|upper }} {{ 'hello wORLD-foo (bar) [baz]'|title }} "
        "{{ 'hello WORLD'|capitalize }}"),
      T("{{ [1, 'a', none]|join(', ') }} {{ xs|join('-', attribute='n') }} {{ 'abc'|join('.') }}",
        R"({"xs": [{"n": 1}, {"n": 2}]})"),
      T("{{ xs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} "
        "{{ xs|rejectattr('role', 'eq', 'user')|list|length }} {{ xs|selectattr('tool')|list }} "
        "{{ xs|selectattr('tool', 'defined')|map(attribute='tool')|join }} {{ xs|map(attribute='x', "
        "default='-')|join }}",
        R"({"xs": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b", "tool": "t"},
                   {"role": "user", "content": "c"}]})"),
      T("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('divisibleby', 2)|list }} "
        "{{ [0, 1, '', 'a']|select|list }} {{ ['a', 'b']|map('upper')|list }}"),
      T("{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ []|first }} {{ 'hey'|list }} {{ "
        "{'a': 1}|list }}"),
      T("{{ 42|string }} {{ '42'|int + 1 }} {{ '3.9'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(0, 16) }} {{ "
        "3.7|int }} "
        "{{ '2.5'|float }} {{ 'z'|float }} {{ 4|float }} {{ true|int }}"),
      T("{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'x'|safe }} {{ [1, 2, 2, 'A', "
        "'a']|unique|list }}"),
      T("{{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, "
        "1]|sort(reverse=true) }} "
        "{{ xs|sort(attribute='n')|map(attribute='n')|list }}",
        R"({"xs": [{"n": 2}, {"n": 1}, {"n": 3}]})"),
      // Equal dicts sort (jinja2 compares [key] lists: == before <); unequal ones raise in both.
      T("{{ [xs[0], xs[0]]|sort }}", R"({"xs": [{"n": 2}, {"n": 1}]})"),
      T("{{ xs|sort }}", R"({"xs": [{"n": 2}, {"n": 1}]})"),
      T("{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.675|round(2) }} {{ 7|round }} {{ "
        "2.1|round(0, 'ceil') }} "
        "{{ 2.9|round(1, 'floor') }} {{ -3|abs }} {{ -2.5|abs }}"),
      T("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) "
        "}}"),
      T("{{ 'one two  three\\nfour-five'|wordcount }} {{ 'abc'|center(9) }}|{{ [1, 5, 3]|max }} {{ [4, "
        "2]|min }} "
        "{{ [1, 2, 3]|sum }} {{ {'b': 1, 'a': 2}|dictsort }} {{ '<a&b>'|e }}"),
      T("{{ data|tojson }}\n{{ data|tojson(indent=2) }}\n{{ data|tojson(sort_keys=true) }}\n"
        "{{ data|tojson(separators=(',', ':')) }}\n{{ 'é'|tojson(ensure_ascii=true) }} {{ [] | "
        "tojson(indent=4) }}",
        R"({"data": {"b": [1, 2.5, {"c": null}], "a": "ünï \"q\" \n\t\u0001", "e": {}, "t": true, "big": 1e20,
                     "small": 1.5e-7, "neg": -0.0}})"),
      T("{{ 'x %s y %d z %.2f %%'|format('s', 3, 2.345) }} {{ '%s-%s' % ('a', 1) }} {{ '%05.1f|%-4s|%r' % "
        "(3.14159, 'ab', 'q') }}"),
      T("{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ 'long text here'|truncate(9, leeway=0) }}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("tests (is ...) match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ x is none }} {{ n is "
        "not none }}",
        R"({"x": 1, "n": null})"),
      T("{% for v in vals %}{{ v is string }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is "
        "number }}"
        "{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is true }}{{ v is false }}|{% endfor %}",
        R"({"vals": ["s", {"a": 1}, [1], 1, 1.5, true, false, null]})"),
      T("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is in "
        "'cat' }} "
        "{{ 2 is in [1, 2] }} {{ 1 is eq 1.0 }} {{ 'a' is equalto 'b' }} {{ 3 is gt 2 }} {{ 3 is le 2 }} "
        "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is sameas none }} {{ 'x' is ne 'y' }}"),
      T("{{ missing is iterable }} {{ missing is sequence }} {{ [1]|map('string') is iterable }} "
        "{{ [1]|map('string') is sequence }} {{ range is callable }} {{ 'upper' is filter }} {{ 'odd' is "
        "test }}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("expressions and Python value semantics match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("{{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.5e300 }} {{ 0.1 + 0.2 }} {{ 1/3 }} "
        "{{ -0.0 }} "
        "{{ 2**10 }} {{ 2**-1 }} {{ 10/4 }} {{ 10/5 }}"),
      T("{{ none }} {{ true }} {{ false }} {{ [1, 'a', none, true, 1.5, {'k': 'v'}] }} {{ ('a',) }} {{ () }} "
        "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', '\\n\\t\\x01é\\u200b\\\\'] }}"),
      T("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ "
        "2**3**2 }} "
        "{{ -2**2 }} {{ 'ab' * 3 }} {{ [0] * 3 }} {{ 3 * 'x' }} {{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }}"),
      // Float floor division rounds as Python's divmod, not floor(a / b) (found by the fuzz test).
      T("{{ 7 // 0.1 }} {{ -7 // 0.1 }} {{ 7 // -0.1 }} {{ 0.0 // -1 }} {{ 1 // 0.3 }} {{ 5.5 // 2 }}"),
      T("{{ 'a' ~ 1 ~ none ~ missing ~ 2.0 }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ true + 1 }}"),
      T("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'a' != 'a' "
        "}} "
        "{{ 1 <= 1 }} {{ 2 >= 3 }} {{ none == none }} {{ missing == missing }} {{ 'a' == missing }}"),
      T("{{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] "
        "}} "
        "{{ 'x' in missing }}"),
      T("{{ 0 or 'a' }} {{ 1 and 'b' }} {{ '' and 'c' }} {{ none or false }} {{ not [] }} {{ not 'x' }} "
        "{{ [] or {} or 'last' }}"),
      T("{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}] {{ 1 if 0 else 2 if 0 "
        "else 3 }}"),
      T("{{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[:-1] }} {{ s[::2] }} {{ l[1:] }} {{ l[-1] }} {{ "
        "l[::-2] }} "
        "{{ s[0] }} {{ s[-1] }} {{ l[10:] }} {{ s[5:1] }} {{ l[-10:2] }}",
        R"({"s": "héllo", "l": [1, 2, 3, 4]})"),
      T("{{ m.a.b }} {{ m['a']['b'] }} {{ m.x }} [{{ m.x|default('none') }}] {{ l.0 }} {{ l[5] }} {{ "
        "m.items()|list }} "
        "{{ m.keys()|list }} {{ m.values()|list }}",
        R"({"m": {"a": {"b": 1}}, "l": [9]})"),
      T("{{ 'Hello World'.startswith('Hell') }} {{ 'x.py'.endswith(('.py', '.txt')) }} {{ "
        "'a,b,,c'.split(',') }} "
        "{{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x '.strip() "
        "}}| "
        "{{ 'xxaxx'.lstrip('x') }} {{ 'xxaxx'.rstrip('x') }} {{ 'abc'.replace('b', 'B') }} {{ 'Ab'.upper() "
        "}} "
        "{{ 'Ab'.lower() }} {{ 'ab cd'.title() }} {{ 'héllo'.find('l') }} {{ 'hello'.rfind('l') }} {{ "
        "'aaa'.count('a') }} "
        "{{ ', '.join(['a', 'b']) }} {{ 'a\\nb'.splitlines() }} {{ '{} and {x}'.format(1, x=2) }} {{ "
        "'abc'.capitalize() }}"),
      T("{{ [1, 2, 3].index(2) }} {{ [1, 1, 2].count(1) }} {{ {'a': 1}.get('a') }} {{ namespace(a=1).a }} "
        "{{ dict(a=1, b=2) }} {{ range(2, 10, 3)|list }} {{ -(3) }} {{ +4 }}"),
      T("{{ 'a' 'b' }} {{ \"x\\u00e9\\x41\\101\\q\" }} {{ 1_000 + 0x10 + 0o7 + 0b11 }} {{ 1.5e3 }} {{ 1_0.5 "
        "}}"),
      T("{{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages|length }} {{ messages[0] }}", "",
        R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}])"),
      T("{{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} {{ tools }} {{ tools is none }} {{ "
        "documents }}"),
      T("{{ strftime_now('%Y-%m') }} {{ strftime_now('%d %b %Y')|length }}"),
      T("{{ 1 ** 1000000000000 }} {{ (-1) ** 999999999999 }} {{ 0 ** 123456789012 }} {{ 3 ** 39 }}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("render errors match jinja2", "[unit]") {
  std::vector<TemplateCase> cases = {
      T("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"),
      T("before {% if true %}{{ raise_exception('bad: ' ~ 3) }}{% endif %}"),
      T("{{ missing.attr }}"),
      T("{{ m.x.y }}", R"({"m": {}})"),
      T("{{ 'a' + 1 }}"),
      T("{{ 1 + missing }}"),
      T("{{ 1 < 'a' }}"),
      T("{{ [1].append(2) }}"),
      T("{{ 1 / 0 }}"),
      T("{% for x in 5 %}{% endfor %}"),
      T("{{ missing() }}"),
      T("{{ 'x'() }}"),
      T("{% set x = 1 %}{% set x.a = 2 %}"),
      T("{{ undefined_fn|tojson }}"),
      T("{{ xs|selectattr('a')|length }}", R"({"xs": []})"),
      T("{{ 1 in 'abc' }}"),
  };
  astrai::test::expect_same_as_jinja2(cases);
}

TEST_CASE("unsupported constructs fail at parse time naming the construct and position", "[unit]") {
  auto r = astrai::ChatTemplate::parse("hello\n{{ x }}\n    {% include 'other.jinja' %}");
  REQUIRE(!r.ok());
  CHECK(r.status().message() == "chat template: unsupported tag 'include' at line 3, column 8");
  auto f = astrai::ChatTemplate::parse("{{ x|frobnicate }}");
  REQUIRE(!f.ok());
  CHECK(f.status().message() == "chat template: unsupported filter 'frobnicate' at line 1, column 6");
  auto t = astrai::ChatTemplate::parse("{% if x is prime %}{% endif %}");
  REQUIRE(!t.ok());
  CHECK(t.status().message() == "chat template: unsupported test 'prime' at line 1, column 12");
  for (const char* bad : {"{% extends 'base' %}", "{% import 'm' as m %}", "{% call m() %}{% endcall %}",
                          "{% for x in y recursive %}{% endfor %}", "{% block b %}{% endblock %}",
                          "{{ 4[3, 1:, 2] }}", "{{ x[:2, 0] }}"}) {
    auto b = astrai::ChatTemplate::parse(bad);
    INFO(bad);
    REQUIRE(!b.ok());
    CHECK(b.status().message().find("chat template: unsupported") == 0);
  }
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  std::string nested_ifs;
  for (int i = 0; i < 5000; ++i) nested_ifs += "{% if x %}";
  for (const std::string& bad :
       std::vector<std::string>{"{% if x %}", "{{ x ", "{% for %}", "{{ (1 }}", "{% endfor %}", "{% break %}",
                                "{# open", deep, nested_ifs}) {
    auto b = astrai::ChatTemplate::parse(bad);
    INFO(bad.substr(0, 80));
    REQUIRE(!b.ok());
    CHECK(b.status().message().find("chat template: syntax error at line 1") == 0);
  }
}

TEST_CASE("runaway templates fail with an error instead of exhausting the machine", "[unit]") {
  // (A 20,000-term `1 ~ 1 ~ ...` chain is now refused by the parser: chat_template_limits_test.cpp.)
  for (const std::string& src : std::vector<std::string>{
           "{{ 'x' * 1000000000000 }}", "{{ [1, 2] * 1000000000000 }}", "{{ 'x'|center(1000000000000) }}",
           "{{ 'x'.zfill(1000000000000) }}", "{{ range(1000000000)|length }}", "{{ 2 ** 200 }}",
           "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}) {
    INFO(src.substr(0, 80));
    auto t = astrai::ChatTemplate::parse(src);
    REQUIRE(t.ok());
    auto r = (*t)->render(astrai::ChatTemplateInput{});
    CHECK(!r.ok());
  }
}
