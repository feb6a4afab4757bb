#include "src/core/json_fields.h"

#include <catch2/catch.hpp>

using namespace astrai;

namespace {

using Error = std::optional<std::string>;

// Collects "key=raw" for every field of a JSON text, or the error it ends with.
Error walk(std::string_view text, std::vector<std::string>& seen, std::string_view stop_at = {}) {
  return json::for_each_field(
      text,
      [&](std::string_view key, json::Value& v) -> Error {
        if (key == stop_at) return "stopped at " + std::string(key);
        std::string raw;
        if (auto e = json::read_raw(v, std::string(key), raw)) return e->message;
        seen.push_back(std::string(key) + "=" + raw);
        return std::nullopt;
      },
      [](simdjson::error_code ec) -> Error { return std::string("bad: ") + simdjson::error_message(ec); },
      []() -> Error { return "not an object"; });
}

// Runs read(value) on the value of {"f": <value>}; returns its error as "field: message", "" if none.
template <typename Read>
std::string read_one(const std::string& value, Read&& read) {
  std::string msg = "(not read)";
  json::for_each_field(R"({"f": )" + value + "}",
                       [&](std::string_view, json::Value& v) -> Error {
                         const json::MaybeFieldError e = read(v);
                         msg = e ? e->field + ": " + e->message : "";
                         return std::nullopt;
                       },
                       [](simdjson::error_code) -> Error { return "bad"; }, []() -> Error { return "bad"; });
  return msg;
}

}  // namespace

TEST_CASE("for_each_field visits every field in document order with unescaped keys", "[unit]") {
  std::vector<std::string> seen;
  CHECK_FALSE(walk(R"({"a": 1, "b\u0021": [1, {"x": 2}], "c": {"d": null}, "e": "s"})", seen));
  CHECK(seen == std::vector<std::string>{"a=1", "b!=[1, {\"x\": 2}]", "c={\"d\": null}", "e=\"s\""});
}

TEST_CASE("for_each_field stops at the first error the callback returns", "[unit]") {
  std::vector<std::string> seen;
  const auto e = walk(R"({"a": 1, "b": 2, "c": 3})", seen, "b");
  REQUIRE(e);
  CHECK(*e == "stopped at b");
  CHECK(seen == std::vector<std::string>{"a=1"});
}

TEST_CASE("for_each_field reports JSON that is not an object, and JSON it cannot read", "[unit]") {
  for (const char* text : {"[1, 2]", "3", "\"s\""}) {
    std::vector<std::string> seen;
    INFO(text);
    CHECK(walk(text, seen) == Error("not an object"));
  }
  std::vector<std::string> seen;
  const auto e = walk(R"({"a": 1, "b" 2})", seen);
  REQUIRE(e);
  CHECK(e->rfind("bad: ", 0) == 0);
  CHECK(seen == std::vector<std::string>{"a=1"});  // fields before the damage were visited
  // A truncated text is refused one way or the other (on-demand parsing may notice it up front).
  for (const char* text : {"{\"a\": 1,", "{\"a\": [1, 2"}) {
    std::vector<std::string> s2;
    INFO(text);
    CHECK(walk(text, s2));
  }
}

TEST_CASE("for_each_field works on nested objects with a bool error type", "[unit]") {
  simdjson::ondemand::parser p;
  simdjson::padded_string text(std::string_view(R"({"outer": {"k1": 1, "k2": 2}})"));
  auto doc = p.iterate(text);
  json::Object outer = doc["outer"].get_object();
  int sum = 0;
  const bool failed = json::for_each_field(
      outer,
      [&](std::string_view, json::Value& v) {
        int64_t i = 0;
        if (json::read_int(v, "k", 0, 10, i)) return true;
        sum += int(i);
        return false;
      },
      [](simdjson::error_code) { return true; });
  CHECK_FALSE(failed);
  CHECK(sum == 3);
}

TEST_CASE("typed reads name the field and say what it must be", "[unit]") {
  int64_t i = 0;
  auto int_case = [&](const char* value) {
    return read_one(value, [&](json::Value& v) { return json::read_int(v, "n", 1, 16, i); });
  };
  CHECK(int_case("1") == "");
  CHECK(int_case("16") == "");
  CHECK(int_case("4.0") == "");
  CHECK(i == 4);
  CHECK(int_case("0") == "n: must be between 1 and 16, got 0");
  CHECK(int_case("17") == "n: must be between 1 and 16, got 17");
  CHECK(int_case("1.5") == "n: must be an integer");
  CHECK(int_case("\"3\"") == "n: must be an integer");
  double d = 0;
  auto num_case = [&](const char* value) {
    return read_one(value, [&](json::Value& v) { return json::read_number(v, "t", 0, 2, d); });
  };
  CHECK(num_case("0") == "");
  CHECK(num_case("2") == "");
  CHECK(d == 2);
  CHECK(num_case("2.5") == "t: must be between 0 and 2, got 2.5");
  CHECK(num_case("true") == "t: must be a number");
  std::vector<std::string> l;
  auto list_case = [&](const char* value) {
    return read_one(value, [&](json::Value& v) { return json::read_string_list(v, "stop", 2, l); });
  };
  CHECK(list_case(R"("x")") == "");
  CHECK(l == std::vector<std::string>{"x"});
  CHECK(list_case(R"(["x", "y"])") == "");
  CHECK(l == std::vector<std::string>{"x", "y"});
  CHECK(list_case(R"(["x", 1])") == "stop[1]: must be a string");
  CHECK(list_case(R"(["x", "y", "z"])") == "stop: at most 2 entries");
  CHECK(list_case(R"(["x", ""])") == "stop[1]: must not be empty");
  CHECK(list_case("5") == "stop: must be a string or an array of strings");
  std::string raw;
  CHECK(read_one(R"( {"a" : [1, 2]} )", [&](json::Value& v) { return json::read_raw(v, "r", raw); }) == "");
  CHECK(raw == R"({"a" : [1, 2]})");
}
