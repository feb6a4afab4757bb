// JSON Schema, `{"type":"json_object"}` and regular expressions compiled to a byte grammar.
//
// The JSON written is compact: no whitespace except one optional space after ':' and ','
// (a model trained on pretty JSON still fits; a model that wanders cannot pad forever). Objects
// list their properties in the schema's order; every required property appears, optional ones may
// be left out; properties the schema does not list are never generated (OpenAI's strict mode; the
// output is valid whatever additionalProperties says), except that an object schema without
// `properties` takes any keys (values: additionalProperties' schema, or any JSON).
//
// Supported: type (one or a list), properties, required, additionalProperties, items, minItems,
// maxItems, enum, const, minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers: see
// below), minLength, maxLength, pattern, format (date, time, date-time, uuid, email: a valid subset
// of each), anyOf, allOf of one schema, $ref to "#", "#/$defs/..." or "#/definitions/...", and
// the annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly). Anything else is an error naming the keyword and where it is.
//
// Numbers: integers have at most 15 digits (exactly representable as a double); numbers are an
// integer part and at most 6 fraction digits, no exponent. Bounds are rounded inward to integers
// (minimum 0.5 generates from 1 up), so every output satisfies them.
#pragma once

#include <string>
#include <string_view>

#include "src/structured/grammar.h"

namespace astrai::structured {

// Each returns "" on success, else the reason (the grammar is then unusable).
std::string compile_json_schema(std::string_view schema_json, Grammar& out);
std::string compile_json_object(Grammar& out);
// The whole output must match `pattern` (vLLM's guided_regex: a full match; ^ and $ are optional).
std::string compile_regex(std::string_view pattern, Grammar& out);

}  // namespace astrai::structured
