#include "server/grammar/json_schema_to_gbnf.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/grammar/gbnf.h"
#include "server/grammar/matcher.h"

namespace tpserve::grammar {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::shared_ptr<const Grammar> FromSchema(const std::string& schema) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status() << "\n" << schema;
  if (!gbnf.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(*gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
  return g.ok() ? *g : nullptr;
}

std::string Refusal(const std::string& schema) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema);
  EXPECT_FALSE(gbnf.ok()) << schema << "\n" << gbnf.value_or("");
  EXPECT_EQ(gbnf.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(gbnf.status().message());
  return message;
}

TEST(JsonSchemaToGbnfTest, IntegerBoundsAreExactOverEveryValueNearThem) {
  struct Case {
    const char* bounds;
    int64_t lo, hi;  // the inclusive range they mean
  } cases[] = {
      {R"("minimum": 0, "maximum": 150)", 0, 150},
      {R"("minimum": -40, "maximum": 125)", -40, 125},
      {R"("minimum": 1900, "maximum": 2100)", 1900, 2100},
      {R"("exclusiveMinimum": 0, "maximum": 9)", 1, 9},
      {R"("minimum": -1000, "exclusiveMaximum": -7)", -1000, -8},
      {R"("minimum": 5, "maximum": 5)", 5, 5},
      {R"("minimum": 1, "maximum": 65535)", 1, 65535},
      {R"("minimum": 99, "maximum": 1001)", 99, 1001},
      {R"("minimum": 2.5, "maximum": 7.5)", 3, 7},
  };
  for (const Case& c : cases) {
    const auto g = FromSchema(absl::StrCat(R"({"type": "integer", )", c.bounds, "}"));
    ASSERT_NE(g, nullptr) << c.bounds;
    for (int64_t v = c.lo - 1200; v <= c.hi + 1200; ++v) {
      EXPECT_EQ(MatchesWhole(g, absl::StrCat(v)), v >= c.lo && v <= c.hi) << c.bounds << " " << v;
    }
    for (int64_t v : {c.lo * 100 - 7, c.hi * 1000 + 3, int64_t{123456789012}}) {
      EXPECT_EQ(MatchesWhole(g, absl::StrCat(v)), v >= c.lo && v <= c.hi) << c.bounds << " " << v;
    }
    EXPECT_FALSE(MatchesWhole(g, absl::StrCat("0", c.hi))) << "leading zero " << c.bounds;
    EXPECT_FALSE(MatchesWhole(g, absl::StrCat(c.hi, ".0"))) << c.bounds;
  }
}

TEST(JsonSchemaToGbnfTest, OneSidedIntegerBounds) {
  const auto at_least = FromSchema(R"({"type": "integer", "minimum": 37})");
  const auto below = FromSchema(R"({"type": "integer", "exclusiveMaximum": -3})");
  const auto any = FromSchema(R"({"type": "integer"})");
  ASSERT_NE(at_least, nullptr);
  ASSERT_NE(below, nullptr);
  ASSERT_NE(any, nullptr);
  for (int64_t v = -2000; v <= 2000; ++v) {
    EXPECT_EQ(MatchesWhole(at_least, absl::StrCat(v)), v >= 37) << v;
    EXPECT_EQ(MatchesWhole(below, absl::StrCat(v)), v < -3) << v;
    EXPECT_TRUE(MatchesWhole(any, absl::StrCat(v))) << v;
  }
  EXPECT_TRUE(MatchesWhole(at_least, "9223372036854775807"));
  EXPECT_TRUE(MatchesWhole(below, "-9223372036854775807"));
  EXPECT_FALSE(MatchesWhole(any, "01"));
  EXPECT_FALSE(MatchesWhole(any, "1.5"));
}

TEST(JsonSchemaToGbnfTest, NumbersAndTheirZeroBounds) {
  const auto any = FromSchema(R"({"type": "number"})");
  const auto nonneg = FromSchema(R"({"type": "number", "minimum": 0})");
  const auto positive = FromSchema(R"({"type": "number", "exclusiveMinimum": 0})");
  ASSERT_NE(positive, nullptr);
  for (const char* v : {"0", "-1.5", "3.25e-7", "12E+3", "-0.0"}) EXPECT_TRUE(MatchesWhole(any, v));
  for (const char* v : {"01", "1.", ".5", "+1", "1e", "--1"}) EXPECT_FALSE(MatchesWhole(any, v));
  for (const char* v : {"0", "0.0", "7.5", "1e3"}) EXPECT_TRUE(MatchesWhole(nonneg, v)) << v;
  for (const char* v : {"-1", "-0.5"}) EXPECT_FALSE(MatchesWhole(nonneg, v)) << v;
  for (const char* v : {"0.001", "1", "19.99", "0.5"}) EXPECT_TRUE(MatchesWhole(positive, v)) << v;
  for (const char* v : {"0", "0.0", "0.000", "-2", "1e-999"}) {
    EXPECT_FALSE(MatchesWhole(positive, v)) << v;
  }
}

TEST(JsonSchemaToGbnfTest, ObjectsKeepTheSchemaOrderWithOptionalMembers) {
  const auto g = FromSchema(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "nick": {"type": "string"},
                   "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age"],
    "additionalProperties": false})");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {
           R"({"name":"Al","age":3})",
           R"({"name":"Al","nick":"A","age":3})",
           R"({"name":"Al","age":3,"tags":["x","y"]})",
           R"({"name":"Al","nick":"A","age":3,"tags":[]})",
           "{\n  \"name\": \"Al\",\n  \"age\": 3\n}",
           R"({ "name" : "\"q\"\n\u00e9", "age": -1 })",
       }) {
    EXPECT_TRUE(MatchesWhole(g, yes)) << yes;
  }
  for (const char* no : {
           R"({"name":"Al"})",                // age is required
           R"({"age":3,"name":"Al"})",        // out of the schema's order
           R"({"name":"Al","age":3,"x":1})",  // no further properties
           R"({"name":"Al","age":3,})",       // trailing comma
           R"({"name":"Al",,"age":3})", R"({"name":1,"age":3})",
           R"({"name":"Al","age":3,"tags":[1]})",
           "{\"name\":\"a\nb\",\"age\":3}",  // a raw newline inside a string
       }) {
    EXPECT_FALSE(MatchesWhole(g, no)) << no;
  }
}

TEST(JsonSchemaToGbnfTest, AdditionalPropertiesAbsentTrueOrASchema) {
  const auto open = FromSchema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  const auto typed = FromSchema(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": {"type": "boolean"}})");
  const auto empty = FromSchema(R"({"type": "object", "additionalProperties": false})");
  ASSERT_NE(typed, nullptr);
  for (const char* yes : {"{}", R"({"a":1})", R"({"a":1,"b":[null,{"c":"d"}]})", R"({"z":2})"}) {
    EXPECT_TRUE(MatchesWhole(open, yes)) << yes;
  }
  EXPECT_TRUE(MatchesWhole(typed, R"({"a":1,"b":true,"c":false})"));
  EXPECT_FALSE(MatchesWhole(typed, R"({"a":1,"b":2})"));
  EXPECT_FALSE(MatchesWhole(typed, R"({"b":true})"));
  EXPECT_TRUE(MatchesWhole(empty, "{}"));
  EXPECT_TRUE(MatchesWhole(empty, "{ }"));
  EXPECT_FALSE(MatchesWhole(empty, R"({"a":1})"));
}

TEST(JsonSchemaToGbnfTest, ArrayCountsPrefixItemsAndClosedTuples) {
  const auto counted = FromSchema(
      R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})");
  ASSERT_NE(counted, nullptr);
  const std::string items[] = {"[]", "[1]", "[1,2]", "[1,2,3]", "[1, 2, 3, 4]", "[1,2,3,4,5]"};
  for (int n = 0; n < 6; ++n) EXPECT_EQ(MatchesWhole(counted, items[n]), n >= 2 && n <= 4) << n;
  const auto tuple = FromSchema(
      R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
          "items": false, "minItems": 1})");
  ASSERT_NE(tuple, nullptr);
  for (const char* yes : {R"(["a"])", R"(["a",1])"}) EXPECT_TRUE(MatchesWhole(tuple, yes)) << yes;
  for (const char* no : {"[]", R"([1])", R"(["a","b"])", R"(["a",1,2])"}) {
    EXPECT_FALSE(MatchesWhole(tuple, no)) << no;
  }
  const auto open_tuple = FromSchema(
      R"({"type": "array", "prefixItems": [{"const": "x"}], "items": {"type": "boolean"}})");
  ASSERT_NE(open_tuple, nullptr);
  for (const char* yes : {"[]", R"(["x"])", R"(["x",true,false])"}) {
    EXPECT_TRUE(MatchesWhole(open_tuple, yes)) << yes;
  }
  EXPECT_FALSE(MatchesWhole(open_tuple, "[true]"));
}

TEST(JsonSchemaToGbnfTest, EnumsConstsTypeListsAndNull) {
  const auto g = FromSchema(
      R"({"type": "object", "properties": {
            "kind": {"enum": ["cat", "dog", 3, null, {"a": [1]}]},
            "v": {"const": "fixed"},
            "maybe": {"type": ["string", "null"]},
            "flag": {"type": "boolean"}},
          "required": ["kind", "v", "maybe", "flag"]})");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {R"({"kind":"cat","v":"fixed","maybe":null,"flag":true})",
                          R"({"kind":{"a":[1]},"v":"fixed","maybe":"x","flag":false})",
                          R"({"kind":null,"v":"fixed","maybe":"","flag":true})"}) {
    EXPECT_TRUE(MatchesWhole(g, yes)) << yes;
  }
  for (const char* no : {R"({"kind":"cow","v":"fixed","maybe":null,"flag":true})",
                         R"({"kind":"cat","v":"other","maybe":null,"flag":true})",
                         R"({"kind":"cat","v":"fixed","maybe":1,"flag":true})",
                         R"({"kind":"cat","v":"fixed","maybe":null,"flag":"true"})"}) {
    EXPECT_FALSE(MatchesWhole(g, no)) << no;
  }
  const auto typed_enum = FromSchema(R"({"type": "string", "enum": ["a", 1, "b"]})");
  EXPECT_TRUE(MatchesWhole(typed_enum, R"("a")"));
  EXPECT_FALSE(MatchesWhole(typed_enum, "1"));  // not a string: the type rules it out
}

TEST(JsonSchemaToGbnfTest, RefsDefinitionsAndRecursion) {
  const auto tree = FromSchema(R"({
    "type": "object",
    "properties": {"value": {"type": "integer"},
                   "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
    "required": ["value"], "additionalProperties": false})");
  ASSERT_NE(tree, nullptr);
  EXPECT_TRUE(MatchesWhole(
      tree, R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4}]}]})"));
  EXPECT_FALSE(
      MatchesWhole(tree, R"({"value":1,"children":[{"value":2},{"value":3},{"value":4}]})"));
  EXPECT_FALSE(MatchesWhole(tree, R"({"value":1,"children":[{"children":[]}]})"));
  const auto defs = FromSchema(R"({
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}},
                        "required": ["x"], "additionalProperties": false}},
    "definitions": {"list": {"type": "object",
                             "properties": {"head": {"$ref": "#/$defs/point"},
                                            "tail": {"anyOf": [{"$ref": "#/definitions/list"},
                                                               {"type": "null"}]}},
                             "required": ["head", "tail"], "additionalProperties": false}},
    "$ref": "#/definitions/list"})");
  ASSERT_NE(defs, nullptr);
  EXPECT_TRUE(MatchesWhole(defs, R"({"head":{"x":1},"tail":{"head":{"x":2},"tail":null}})"));
  EXPECT_FALSE(MatchesWhole(defs, R"({"head":{"x":1},"tail":{"head":{"y":2},"tail":null}})"));
}

TEST(JsonSchemaToGbnfTest, AnyOfOneOfAndAllOf) {
  const auto any = FromSchema(
      R"({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}]})");
  ASSERT_NE(any, nullptr);
  for (const char* yes : {"10", "999", R"("")", R"("ab")"}) EXPECT_TRUE(MatchesWhole(any, yes));
  for (const char* no : {"9", R"("abc")", "null"}) EXPECT_FALSE(MatchesWhole(any, no));
  // The shared keywords apply to each alternative.
  const auto shared = FromSchema(
      R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
          "additionalProperties": false,
          "oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                    {"properties": {"kind": {"const": "b"}, "n": {"type": "integer"}},
                     "required": ["kind", "n"]}]})");
  ASSERT_NE(shared, nullptr);
  EXPECT_TRUE(MatchesWhole(shared, R"({"id":1,"kind":"a"})"));
  EXPECT_TRUE(MatchesWhole(shared, R"({"id":1,"kind":"b","n":2})"));
  EXPECT_FALSE(MatchesWhole(shared, R"({"id":1,"kind":"b"})"));
  EXPECT_FALSE(MatchesWhole(shared, R"({"kind":"a"})"));
  const auto all = FromSchema(
      R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}},
                            "required": ["id"]}},
          "allOf": [{"$ref": "#/$defs/base"},
                    {"properties": {"id": {"maximum": 9}, "name": {"type": "string"}},
                     "required": ["name"]}]})");
  ASSERT_NE(all, nullptr);
  EXPECT_TRUE(MatchesWhole(all, R"({"id":3,"name":"x"})"));
  EXPECT_FALSE(MatchesWhole(all, R"({"id":10,"name":"x"})"));
  EXPECT_FALSE(MatchesWhole(all, R"({"id":3})"));
  EXPECT_THAT(Refusal(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"),
              HasSubstr("/type: the merged types have none in common"));
}

TEST(JsonSchemaToGbnfTest, StringLengthsCountCharactersNotBytesOrEscapes) {
  const auto g = FromSchema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {R"("ab")", R"("abc")", R"("\"\\")", R"("é中")", R"("\u00e9x")"}) {
    EXPECT_TRUE(MatchesWhole(g, yes)) << yes;
  }
  for (const char* no : {R"("a")", R"("abcd")", R"("\"")", R"("ab)"}) {
    EXPECT_FALSE(MatchesWhole(g, no)) << no;
  }
}

TEST(JsonSchemaToGbnfTest, Formats) {
  struct Case {
    const char* format;
    std::vector<std::string> yes, no;
  } cases[] = {
      {"date", {"2024-02-29", "1999-12-31"}, {"2024-13-01", "2024-1-01", "24-01-01", "2024-01-32"}},
      {"time", {"09:00:00Z", "23:59:59.123+05:30"}, {"24:00:00Z", "09:00", "09:00:00"}},
      {"date-time", {"2024-05-01T12:30:00Z"}, {"2024-05-01 12:30:00Z", "2024-05-01"}},
      {"email", {"a.b+c@example.com", "x@mail.co.uk"}, {"ab", "a@b", "@x.com", "a b@x.com"}},
      {"uuid",
       {"123e4567-e89b-12d3-a456-426614174000"},
       {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
  };
  for (const Case& c : cases) {
    const auto g = FromSchema(absl::StrCat(R"({"type": "string", "format": ")", c.format, "\"}"));
    ASSERT_NE(g, nullptr) << c.format;
    for (const std::string& v : c.yes) EXPECT_TRUE(MatchesWhole(g, "\"" + v + "\"")) << v;
    for (const std::string& v : c.no) EXPECT_FALSE(MatchesWhole(g, "\"" + v + "\"")) << v;
  }
}

TEST(JsonSchemaToGbnfTest, PatternsAreAnchoredAsJsonSchemaSays) {
  const auto anchored = FromSchema(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"})");
  ASSERT_NE(anchored, nullptr);
  EXPECT_TRUE(MatchesWhole(anchored, R"("AB-123")"));
  EXPECT_FALSE(MatchesWhole(anchored, R"("xAB-123")"));
  EXPECT_FALSE(MatchesWhole(anchored, R"("AB-12")"));
  // Unanchored: the match may be anywhere in the string.
  const auto anywhere = FromSchema(R"({"type": "string", "pattern": "ab+c"})");
  ASSERT_NE(anywhere, nullptr);
  for (const char* yes : {R"("abc")", R"("xxabbbcyy")", R"("\"abc\n")"}) {
    EXPECT_TRUE(MatchesWhole(anywhere, yes)) << yes;
  }
  EXPECT_FALSE(MatchesWhole(anywhere, R"("ac")"));
  // Characters JSON escapes are written escaped.
  const auto quote = FromSchema(R"({"type": "string", "pattern": "^a\"b$"})");
  ASSERT_NE(quote, nullptr);
  EXPECT_TRUE(MatchesWhole(quote, R"("a\"b")"));
}

TEST(JsonSchemaToGbnfTest, RefusalsNameTheKeywordsPointer) {
  EXPECT_THAT(
      Refusal(R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}})"),
      StartsWith("/properties/a/multipleOf: not supported"));
  EXPECT_THAT(Refusal(R"({"type": "number", "maximum": 3.5})"), StartsWith("/maximum: "));
  EXPECT_THAT(Refusal(R"({"type": "number", "minimum": 1})"), StartsWith("/minimum: "));
  EXPECT_THAT(Refusal(R"({"type": "string", "format": "ipv4"})"), StartsWith("/format: "));
  EXPECT_THAT(Refusal(R"({"items": {"$ref": "#/components/x"}})"), StartsWith("/items/$ref: "));
  EXPECT_THAT(Refusal(R"({"$ref": "#/$defs/missing"})"), HasSubstr("names no definition"));
  EXPECT_THAT(Refusal(R"({"type": "strnig"})"), StartsWith("/type: unknown type"));
  EXPECT_THAT(Refusal(R"({"properties": {"a/b~": {"not": {}}}})"),
              StartsWith("/properties/a~1b~0/not: not supported"));
  EXPECT_THAT(Refusal("{\"type\": "), StartsWith("/: the schema is not JSON"));
  EXPECT_THAT(Refusal("false"), HasSubstr("accepts nothing"));
  EXPECT_THAT(Refusal("[1]"), HasSubstr("must be an object or a boolean"));
  EXPECT_THAT(Refusal(R"({"type": "string", "minLength": 5, "maxLength": 2})"),
              StartsWith("/minLength: "));
  EXPECT_THAT(Refusal(R"({"type": "array", "minItems": -1})"), StartsWith("/minItems: "));
  EXPECT_THAT(Refusal(R"({"type": "integer", "minimum": 1e30})"), StartsWith("/minimum: "));
  EXPECT_THAT(Refusal(R"({"properties": 3})"), StartsWith("/properties: "));
  EXPECT_THAT(Refusal(R"({"required": "a"})"), StartsWith("/required: "));
  // Nesting past the bound, and a reference that only refers to itself.
  std::string deep = "true";
  for (int i = 0; i < 80; ++i) deep = absl::StrCat(R"({"items": )", deep, "}");
  EXPECT_THAT(Refusal(deep), HasSubstr("deeper than"));
  EXPECT_THAT(Refusal(R"({"allOf": [{"$ref": "#"}]})"), HasSubstr("deeper than"));
}

TEST(JsonSchemaToGbnfTest, EverySchemaOfTheCorpusCompiles) {
  std::ifstream in(TPSERVE_SOURCE_DIR "/tests/schemas/corpus.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json corpus = nlohmann::json::parse(text.str());
  ASSERT_GE(corpus.size(), 100u);
  for (const nlohmann::json& entry : corpus) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    EXPECT_NE(FromSchema(entry["schema"].dump()), nullptr);
  }
}

TEST(JsonSchemaToGbnfTest, JsonObjectIsAnyObject) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(JsonObjectGbnf());
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* yes : {"{}", R"({"a":[1,{"b":null}],"c":"d","e":-1.5e3,"f":true})"}) {
    EXPECT_TRUE(MatchesWhole(*g, yes)) << yes;
  }
  for (const char* no : {"[]", R"("a")", "{", R"({"a"})", R"({a:1})"}) {
    EXPECT_FALSE(MatchesWhole(*g, no)) << no;
  }
}

}  // namespace
}  // namespace tpserve::grammar
