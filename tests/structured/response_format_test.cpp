// Reading the structured-output fields of a request: chat's response_format and the Responses
// API's text.format give the same constraint, and a bad one is an error naming the field.
#include "src/structured/response_format.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

using namespace astrai;
using namespace astrai::structured;

namespace {

namespace od = simdjson::ondemand;

// Runs `read` on the JSON value `text`.
template <typename Read>
json::MaybeFieldError read_json(std::string_view text, Read&& read) {
  od::parser p;
  simdjson::padded_string padded(text);
  od::document doc;
  json::Value v;
  REQUIRE(!p.iterate(padded).get(doc));
  REQUIRE(!doc.get_value().get(v));
  return read(v);
}

json::MaybeFieldError text_format(std::string_view text, ConstraintSpec& out) {
  return read_json(text, [&](json::Value& v) { return read_text_format(v, "text.format", out); });
}

json::MaybeFieldError response_format(std::string_view text, ConstraintSpec& out) {
  return read_json(text, [&](json::Value& v) {
    bool handled = false;
    auto e = read_constraint_field("response_format", v, out, handled);
    CHECK(handled);
    return e;
  });
}

constexpr std::string_view kSchema =
    R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})";

}  // namespace

TEST_CASE("text.format json_schema constrains to its schema, as response_format's json_schema does") {
  ConstraintSpec responses, chat;
  auto e = text_format(R"({"type":"json_schema","name":"e","strict":true,"description":"d","schema":)" +
                           std::string(kSchema) + "}",
                       responses);
  INFO((e ? e->message : ""));
  REQUIRE(!e);
  REQUIRE(!response_format(R"({"type":"json_schema","json_schema":{"name":"e","strict":true,"schema":)" +
                               std::string(kSchema) + "}}",
                           chat));
  CHECK(responses.kind == ConstraintKind::json_schema);
  CHECK(responses.source == kSchema);
  CHECK(chat.kind == responses.kind);
  CHECK(chat.source == responses.source);
}

TEST_CASE("text.format json_object and text: an object, or no constraint") {
  ConstraintSpec obj, text;
  REQUIRE(!text_format(R"({"type":"json_object"})", obj));
  CHECK(obj.kind == ConstraintKind::json_object);
  REQUIRE(!text_format(R"({"type":"text"})", text));
  CHECK(text.kind == ConstraintKind::none);
}

TEST_CASE("a bad text.format is an error naming the field inside it") {
  struct Case {
    std::string_view json, field, words;
  };
  const Case cases[] = {
      {R"({"type":"json_schema","name":"x"})", "text.format.schema", "is required"},
      {R"({"type":"json_schema","schema":null})", "text.format.schema", "is required"},
      {R"({"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}}})",
       "text.format.schema.properties.a", "'multipleOf'"},
      {R"({"type":"json_schema","strict":"yes","schema":{}})", "text.format.strict", "boolean"},
      {R"({"type":"grammar"})", "text.format.type", "'grammar'"},
      {R"({"name":"x"})", "text.format.type", "is required"},
      {R"(["json_object"])", "text.format", "must be an object"},
  };
  for (const auto& c : cases) {
    ConstraintSpec out;
    auto e = text_format(c.json, out);
    INFO(c.json);
    REQUIRE(e);
    CHECK(e->field == c.field);
    INFO(e->message);
    CHECK(e->message.find(c.words) != std::string::npos);
    CHECK(out.kind == ConstraintKind::none);
  }
}
