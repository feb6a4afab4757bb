#include "src/core/json_writer.h"

#include <simdjson.h>

#include <catch2/catch.hpp>
#include <random>

#include "src/core/utf8.h"

using astrai::JsonWriter;

TEST_CASE("json writer places commas and escapes control characters", "[unit]") {
  JsonWriter w;
  w.begin_object().key("a").value(1).key("s").value("q\"\\\n\x01").key("arr").begin_array();
  w.value(true).null().value(2.5).end_array().end_object();
  CHECK(w.str() == R"({"a":1,"s":"q\"\\\n\u0001","arr":[true,null,2.5]})");
}

TEST_CASE("json writer output of arbitrary bytes always parses back", "[unit]") {
  std::mt19937 rng(1234);
  simdjson::dom::parser parser;
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = char(rng() & 0xff);
    JsonWriter w;
    w.begin_object().key("k").value(s).end_object();
    auto doc = parser.parse(w.str());
    REQUIRE(doc.error() == simdjson::SUCCESS);
    std::string_view back = doc["k"].get_string().value();
    if (astrai::utf8_is_valid(s)) CHECK(back == s);
  }
}

TEST_CASE("utf8 incomplete tail finds cut sequences only", "[unit]") {
  CHECK(astrai::utf8_incomplete_tail("abc") == 0);
  CHECK(astrai::utf8_incomplete_tail("a\xE2\x82") == 2);
  CHECK(astrai::utf8_incomplete_tail("a\xE2\x82\xAC") == 0);
  CHECK(astrai::utf8_incomplete_tail("\xF0\x9F") == 2);
  CHECK(astrai::utf8_incomplete_tail("\xFF") == 0);
}

TEST_CASE("json writer keeps large doubles parseable (exponent form, not a 21-digit integer)", "[unit]") {
  simdjson::dom::parser parser;
  for (double v : {3.3634389772487426e20, -1e300, 123456789012345680.0, 1e15, 42.0, 0.1}) {
    astrai::JsonWriter w;
    w.begin_array().value(v).end_array();
    INFO(w.str());
    auto doc = parser.parse(w.str());
    REQUIRE(doc.error() == simdjson::SUCCESS);
    CHECK(double(doc.at(0)) == v);
  }
}
