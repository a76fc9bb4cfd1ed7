#include "server/grammar/json_schema_to_gbnf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "server/grammar/gbnf.h"
#include "server/grammar/regex_to_gbnf.h"

namespace tpserve::grammar {
namespace {

using Json = nlohmann::ordered_json;  // keeps `properties` in the schema's order

constexpr int kMaxDepth = 64;
constexpr size_t kMaxGrammarBytes = 1 << 20;
constexpr int kMaxIntegerDigits = 19;
constexpr int64_t kMaxBound = 999999999999999999;  // 18 digits: bounds past it are refused

// The shared rules, each written once into the output when something uses it.
constexpr const char* kPrimitives[][2] = {
    {"ws", R"(( " " | "\n" [ \t]{0,24} )?)"},
    {"char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"},
    {"string", R"("\"" char* "\"")"},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,18} ))"},
    {"fraction", R"("." [0-9]{1,15})"},
    {"exponent", R"([eE] [-+]? [0-9]{1,3})"},
    {"number", R"(integer fraction? exponent?)"},
    {"boolean", R"("true" | "false")"},
    {"null", R"("null")"},
    {"member", R"(string ws ":" ws value ws)"},
    {"object", R"("{" ws ( member ( "," ws member )* )? "}")"},
    {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")"},
    {"value", R"(object | array | string | number | boolean | null)"},
    {"date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"date-time", R"(date "T" time)"},
    {"email", R"([a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ( "." [a-zA-Z0-9-]{1,63} ){1,8})"},
    {"hex", R"([0-9a-fA-F])"},
    {"uuid", R"(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})"},
};

// Which primitives each one refers to (so writing one writes what it needs).
const std::map<std::string, std::vector<std::string>>& PrimitiveDeps() {
  static const auto* deps = new std::map<std::string, std::vector<std::string>>{
      {"string", {"char"}},
      {"number", {"integer", "fraction", "exponent"}},
      {"member", {"string", "ws", "value"}},
      {"object", {"ws", "member"}},
      {"array", {"ws", "value"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"date-time", {"date", "time"}},
      {"uuid", {"hex"}},
  };
  return *deps;
}

const std::set<std::string>& Annotations() {
  static const auto* keys = new std::set<std::string>{
      "title",    "description", "default",   "examples",   "$schema", "$id",
      "$comment", "readOnly",    "writeOnly", "deprecated", "$defs",   "definitions"};
  return *keys;
}

const std::set<std::string>& Keywords() {
  static const auto* keys = new std::set<std::string>{"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "enum",
                                                      "const",
                                                      "items",
                                                      "prefixItems",
                                                      "minItems",
                                                      "maxItems",
                                                      "$ref",
                                                      "anyOf",
                                                      "oneOf",
                                                      "allOf",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "format",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum"};
  return *keys;
}

// RFC 6901: `~` as ~0 and `/` as ~1.
std::string PointerPart(absl::string_view key) {
  return absl::StrReplaceAll(key, {{"~", "~0"}, {"/", "~1"}});
}

absl::Status Refuse(absl::string_view pointer, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(pointer.empty() ? "/" : pointer, ": ", why));
}

std::string Digits(int64_t n) { return absl::StrCat(n); }

// Equal-length digit strings >= `s` (`all_zero` when every digit of s is 0).
std::string AtLeast(absl::string_view s) {
  if (s.empty()) return "\"\"";
  if (s.find_first_not_of('0') == absl::string_view::npos) {
    return absl::StrCat("[0-9]{", s.size(), "}");
  }
  std::string out = absl::StrCat("( \"", s.substr(0, 1), "\" ", AtLeast(s.substr(1)));
  if (s[0] < '9') {
    absl::StrAppend(&out, " | [", std::string(1, static_cast<char>(s[0] + 1)), "-9]");
    if (s.size() > 1) absl::StrAppend(&out, " [0-9]{", s.size() - 1, "}");
  }
  return out + " )";
}

// Equal-length digit strings <= `s`.
std::string AtMost(absl::string_view s) {
  if (s.empty()) return "\"\"";
  if (s.find_first_not_of('9') == absl::string_view::npos) {
    return absl::StrCat("[0-9]{", s.size(), "}");
  }
  std::string out = absl::StrCat("( \"", s.substr(0, 1), "\" ", AtMost(s.substr(1)));
  if (s[0] > '0') {
    absl::StrAppend(&out, " | [0-", std::string(1, static_cast<char>(s[0] - 1)), "]");
    if (s.size() > 1) absl::StrAppend(&out, " [0-9]{", s.size() - 1, "}");
  }
  return out + " )";
}

// Equal-length digit strings from `x` to `y` (x <= y).
std::string Between(absl::string_view x, absl::string_view y) {
  if (x.empty()) return "\"\"";
  if (x[0] == y[0]) {
    return absl::StrCat("\"", x.substr(0, 1), "\" ", Between(x.substr(1), y.substr(1)));
  }
  std::vector<std::string> alts;
  alts.push_back(absl::StrCat("\"", x.substr(0, 1), "\" ", AtLeast(x.substr(1))));
  if (x[0] + 1 <= y[0] - 1) {
    std::string mid = absl::StrCat("[", std::string(1, static_cast<char>(x[0] + 1)), "-",
                                   std::string(1, static_cast<char>(y[0] - 1)), "]");
    if (x.size() > 1) absl::StrAppend(&mid, " [0-9]{", x.size() - 1, "}");
    alts.push_back(std::move(mid));
  }
  alts.push_back(absl::StrCat("\"", y.substr(0, 1), "\" ", AtMost(y.substr(1))));
  return absl::StrCat("( ", absl::StrJoin(alts, " | "), " )");
}

// Decimal numerals without leading zeros for lo..hi (0 <= lo; hi absent = unbounded, up to
// kMaxIntegerDigits digits).
std::string NaturalRange(int64_t lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  const int lo_digits = static_cast<int>(Digits(lo).size());
  const int hi_digits = hi ? static_cast<int>(Digits(*hi).size()) : kMaxIntegerDigits;
  int64_t first = 1;  // 10^(digits-1)
  for (int d = 1; d < lo_digits; ++d) first *= 10;
  for (int d = lo_digits; d <= hi_digits; ++d) {
    const int64_t from = d == 1 ? 0 : first;
    const bool last = hi && d == hi_digits;
    if (!last && d > lo_digits) {  // every d-digit numeral, and all longer ones if unbounded
      alts.push_back(hi ? absl::StrCat("[1-9] [0-9]{", d - 1, "}")
                        : absl::StrCat("[1-9] [0-9]{", d - 1, ",", kMaxIntegerDigits - 1, "}"));
      if (!hi) break;
    } else {
      const std::string x = Digits(std::max(lo, from));
      const std::string y = last ? Digits(*hi) : std::string(d, '9');
      alts.push_back(Between(x, y));
    }
    if (d < 18) first *= 10;
  }
  return alts.size() == 1 ? alts[0] : absl::StrCat("( ", absl::StrJoin(alts, " | "), " )");
}

// Integers lo..hi (either end may be open).
std::string IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // the negative ones: "-" and a magnitude
    if (!hi || *hi < 0) {
      const int64_t from = hi ? -*hi : 1;
      alts.push_back(absl::StrCat(
          "\"-\" ", NaturalRange(from, lo ? std::optional<int64_t>(-*lo) : std::nullopt)));
    } else {
      alts.push_back(absl::StrCat(
          "\"-\" ", NaturalRange(1, lo ? std::optional<int64_t>(-*lo) : std::nullopt)));
    }
  }
  if (!hi || *hi >= 0) alts.push_back(NaturalRange(lo ? std::max<int64_t>(*lo, 0) : 0, hi));
  return alts.size() == 1 ? alts[0] : absl::StrCat("( ", absl::StrJoin(alts, " | "), " )");
}

// The JSON type names a schema's `type` may list.
bool KnownType(const std::string& t) {
  return t == "string" || t == "integer" || t == "number" || t == "boolean" || t == "null" ||
         t == "object" || t == "array";
}

bool ValueHasType(const Json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  return v.is_array();
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  // The shared rules named in `used`.
  static std::string PrimitiveRules(const std::set<std::string>& used) {
    std::string out;
    for (const auto& [name, rule] : kPrimitives) {
      if (used.contains(name)) absl::StrAppend(&out, name, " ::= ", rule, "\n");
    }
    return out;
  }

  // GBNF for any JSON object.
  static std::string AnyObject() {
    Converter c(Json(nullptr));
    c.Use("object");
    return absl::StrCat("root ::= object\n", PrimitiveRules(c.used_));
  }

  absl::StatusOr<std::string> Run() {
    absl::StatusOr<std::string> body = Visit(root_, "", 0);
    if (!body.ok()) return body.status();
    std::string out = absl::StrCat("root ::= ", *body, "\n");
    for (const auto& [name, rule] : rules_) absl::StrAppend(&out, name, " ::= ", rule, "\n");
    absl::StrAppend(&out, regex_rules_, PrimitiveRules(used_));
    if (out.size() > kMaxGrammarBytes) {
      return Refuse("", absl::StrCat("the schema's grammar is past ", kMaxGrammarBytes, " bytes"));
    }
    return out;
  }

 private:
  // A shared rule by name, and those it refers to.
  std::string Use(const std::string& name) {
    if (used_.insert(name).second) {
      auto it = PrimitiveDeps().find(name);
      if (it != PrimitiveDeps().end()) {
        for (const std::string& dep : it->second) Use(dep);
      }
    }
    return name;
  }

  // A rule for `body` (one per distinct body), so expressions stay small.
  std::string Rule(const std::string& body) {
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    std::string name = absl::StrCat("s", rules_.size());
    rules_.emplace_back(name, body);
    bytes_ += body.size();
    by_body_.emplace(body, name);
    return name;
  }

  absl::StatusOr<const Json*> Resolve(const std::string& ref, const std::string& pointer) {
    if (ref == "#") return &root_;
    if (!root_.is_object()) return Refuse(pointer, absl::StrCat("$ref ", ref, " names nothing"));
    for (const char* base : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(base, 0) != 0) continue;
      const std::string key =
          absl::StrReplaceAll(ref.substr(strlen(base)), {{"~1", "/"}, {"~0", "~"}});
      const std::string defs = std::string(base + 2, strlen(base) - 3);  // $defs, definitions
      if (!root_.contains(defs) || !root_[defs].is_object() || !root_[defs].contains(key)) {
        return Refuse(pointer, absl::StrCat("$ref ", ref, " names no definition"));
      }
      return &root_[defs][key];
    }
    return Refuse(
        pointer, absl::StrCat("$ref ", ref, " not supported (only #, #/$defs/x, #/definitions/x)"));
  }

  // A $ref as a rule of its own (written once; recursion refers to it by name).
  absl::StatusOr<std::string> RefRule(const std::string& ref, const std::string& pointer,
                                      int depth) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    absl::StatusOr<const Json*> target = Resolve(ref, pointer);
    if (!target.ok()) return target.status();
    std::string name = absl::StrCat("ref", refs_.size());
    refs_.emplace(ref, name);
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    absl::StatusOr<std::string> body = Visit(**target, ref == "#" ? "" : ref.substr(1), depth + 1);
    if (!body.ok()) return body.status();
    rules_[slot].second = *body;
    return name;
  }

  // `a` with `b`'s constraints added (allOf, and a schema's keywords shared by its anyOf /
  // oneOf alternatives): bounds tightened, properties and required united, types and enums
  // intersected; anything else must agree.
  absl::StatusOr<Json> Merge(Json a, const Json& b_in, const std::string& pointer) {
    Json b = b_in;
    if (b.is_boolean()) {
      if (b.get<bool>()) return a;
      return Refuse(pointer, "schema false accepts nothing");
    }
    if (!b.is_object()) return Refuse(pointer, "a schema must be an object or a boolean");
    if (b.contains("$ref")) {
      if (!b["$ref"].is_string()) return Refuse(pointer + "/$ref", "must be a string");
      absl::StatusOr<const Json*> target = Resolve(b["$ref"].get<std::string>(), pointer);
      if (!target.ok()) return target.status();
      Json rest = b;
      rest.erase("$ref");
      absl::StatusOr<Json> merged = Merge(**target, rest, pointer);
      if (!merged.ok()) return merged.status();
      b = *std::move(merged);
    }
    for (auto& [key, v] : b.items()) {
      if (!a.contains(key)) {
        a[key] = v;
        continue;
      }
      Json& mine = a[key];
      if (Annotations().contains(key) || mine == v) continue;
      if (key == "properties" && mine.is_object() && v.is_object()) {
        for (auto& [name, s] : v.items()) {
          mine[name] = mine.contains(name) ? Json{{"allOf", Json::array({mine[name], s})}} : s;
        }
      } else if (key == "required" && mine.is_array() && v.is_array()) {
        for (const Json& name : v) {
          if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
        }
      } else if ((key == "minimum" || key == "exclusiveMinimum" || key == "minLength" ||
                  key == "minItems") &&
                 mine.is_number() && v.is_number()) {
        if (v > mine) mine = v;
      } else if ((key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" ||
                  key == "maxItems") &&
                 mine.is_number() && v.is_number()) {
        if (v < mine) mine = v;
      } else if (key == "type") {
        Json both = Json::array();
        const Json mine_list = mine.is_array() ? mine : Json::array({mine});
        const Json v_list = v.is_array() ? v : Json::array({v});
        for (const Json& t : mine_list) {
          for (const Json& u : v_list) {
            if (t == u || (t == "number" && u == "integer")) both.push_back(u);
            if (t == "integer" && u == "number") both.push_back(t);
          }
        }
        if (both.empty()) return Refuse(pointer + "/type", "the merged types have none in common");
        mine = both;
      } else if (key == "enum" && mine.is_array() && v.is_array()) {
        Json both = Json::array();
        for (const Json& x : mine) {
          if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
        }
        mine = both;
      } else {
        return Refuse(absl::StrCat(pointer, "/", PointerPart(key)),
                      "conflicting values where schemas are combined");
      }
    }
    return a;
  }

  absl::StatusOr<std::string> Visit(const Json& s, const std::string& pointer, int depth) {
    if (depth > kMaxDepth) {
      return Refuse(pointer, absl::StrCat("schema nests (or refers) deeper than ", kMaxDepth));
    }
    if (bytes_ > kMaxGrammarBytes) {
      return Refuse(pointer,
                    absl::StrCat("the schema's grammar is past ", kMaxGrammarBytes, " bytes"));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return Use("value");
      return Refuse(pointer, "schema false accepts nothing");
    }
    if (!s.is_object()) return Refuse(pointer, "a schema must be an object or a boolean");
    bool constraining = false;
    for (auto& [key, v] : s.items()) {
      if (Annotations().contains(key)) continue;
      if (!Keywords().contains(key)) {
        return Refuse(absl::StrCat(pointer, "/", PointerPart(key)), "not supported");
      }
      constraining = true;
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Refuse(pointer + "/$ref", "must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      bool siblings = false;
      for (auto& [key, v] : s.items()) siblings |= key != "$ref" && !Annotations().contains(key);
      if (!siblings) return RefRule(ref, pointer + "/$ref", depth);
      Json rest = s;
      rest.erase("$ref");
      absl::StatusOr<Json> merged = Merge(rest, Json{{"$ref", ref}}, pointer);
      if (!merged.ok()) return merged.status();
      return Visit(*merged, pointer, depth + 1);
    }
    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.empty()) {
        return Refuse(pointer + "/allOf", "must be a non-empty array");
      }
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all.size(); ++i) {
        absl::StatusOr<Json> m = Merge(merged, all[i], absl::StrCat(pointer, "/allOf/", i));
        if (!m.ok()) return m.status();
        merged = *std::move(m);
      }
      return Visit(merged, pointer, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& alts = s[key];
      const std::string at = absl::StrCat(pointer, "/", key);
      if (!alts.is_array() || alts.empty()) return Refuse(at, "must be a non-empty array");
      Json shared = s;
      shared.erase(key);
      std::vector<std::string> out;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string alt_at = absl::StrCat(at, "/", i);
        absl::StatusOr<std::string> alt;
        bool only_annotations = true;
        for (auto& [k, v] : shared.items()) only_annotations &= Annotations().contains(k);
        if (only_annotations) {
          alt = Visit(alts[i], alt_at, depth + 1);
        } else {
          absl::StatusOr<Json> m = Merge(shared, alts[i], alt_at);
          if (!m.ok()) return m.status();
          alt = Visit(*m, alt_at, depth + 1);
        }
        if (!alt.ok()) return alt.status();
        out.push_back(*alt);
      }
      return Rule(absl::StrJoin(out, " | "));
    }
    if (!constraining) return Use("value");

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      const Json list = t.is_array() ? t : Json::array({t});
      if (list.empty()) return Refuse(pointer + "/type", "must name at least one type");
      for (const Json& x : list) {
        if (!x.is_string() || !KnownType(x.get<std::string>())) {
          return Refuse(pointer + "/type", absl::StrCat("unknown type ", x.dump()));
        }
        types.push_back(x.get<std::string>());
      }
    }
    if (s.contains("const") || s.contains("enum")) {
      Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
      const std::string at = pointer + (s.contains("const") ? "/const" : "/enum");
      if (!values.is_array() || values.empty()) return Refuse(at, "must be a non-empty array");
      std::vector<std::string> alts;
      for (const Json& v : values) {
        bool typed = types.empty();
        for (const std::string& t : types) typed |= ValueHasType(v, t);
        if (typed) alts.push_back(GbnfLiteral(v.dump()));
      }
      if (alts.empty()) return Refuse(at, "no value has the schema's type");
      return Rule(absl::StrJoin(alts, " | "));
    }
    if (types.empty()) {  // the type the keywords imply
      const auto has = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
      };
      if (has({"properties", "required", "additionalProperties"})) types.emplace_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.emplace_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.emplace_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
        types.emplace_back("number");
      }
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      absl::StatusOr<std::string> alt;
      if (t == "string") {
        alt = String(s, pointer);
      } else if (t == "integer") {
        alt = Integer(s, pointer);
      } else if (t == "number") {
        alt = Number(s, pointer);
      } else if (t == "boolean" || t == "null") {
        alt = Use(t);
      } else if (t == "object") {
        alt = Object(s, pointer, depth);
      } else {
        alt = Array(s, pointer, depth);
      }
      if (!alt.ok()) return alt.status();
      alts.push_back(*alt);
    }
    return alts.size() == 1 ? alts[0] : Rule(absl::StrJoin(alts, " | "));
  }

  // A non-negative integer keyword (minLength, maxItems, ...), or nullopt if absent.
  absl::StatusOr<std::optional<int64_t>> Count(const Json& s, const char* key,
                                               const std::string& pointer) {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000) {
      return Refuse(absl::StrCat(pointer, "/", key), "must be an integer from 0 to 10000");
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<std::string> String(const Json& s, const std::string& pointer) {
    absl::StatusOr<std::optional<int64_t>> min = Count(s, "minLength", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(s, "maxLength", pointer);
    if (!max.ok()) return max.status();
    const bool lengths = min->has_value() || max->has_value();
    if (s.contains("format")) {
      const Json& f = s["format"];
      const std::string at = pointer + "/format";
      if (!f.is_string()) return Refuse(at, "must be a string");
      const std::string name = f.get<std::string>();
      if (name != "date" && name != "time" && name != "date-time" && name != "email" &&
          name != "uuid") {
        return Refuse(at, absl::StrCat("format ", name,
                                       " not supported (date, time, date-time, email, uuid)"));
      }
      if (lengths || s.contains("pattern")) {
        return Refuse(at, "format with minLength, maxLength or pattern not supported");
      }
      return Rule(absl::StrCat("\"\\\"\" ", Use(name), " \"\\\"\""));
    }
    if (s.contains("pattern")) {
      const std::string at = pointer + "/pattern";
      if (!s["pattern"].is_string()) return Refuse(at, "must be a string");
      if (lengths) return Refuse(at, "pattern with minLength or maxLength not supported");
      // JSON schema's pattern matches anywhere in the string unless anchored.
      std::string re = s["pattern"].get<std::string>();
      const bool head = !re.empty() && re.front() == '^';
      const bool tail = re.size() >= 2 && re.back() == '$' && re[re.size() - 2] != '\\';
      if (head) re.erase(0, 1);
      if (tail) re.pop_back();
      re = absl::StrCat(head ? "" : "[\\s\\S]*", "(?:", re, ")", tail ? "" : "[\\s\\S]*");
      const std::string name = absl::StrCat("pattern", patterns_++);
      RegexOptions options;
      options.json_string = true;
      absl::StatusOr<std::string> rules = RegexToGbnf(re, name, options);
      if (!rules.ok()) return Refuse(at, rules.status().message());
      absl::StrAppend(&regex_rules_, *rules, "\n");
      bytes_ += rules->size();
      rules_.emplace_back(absl::StrCat(name, "-quoted"),
                          absl::StrCat("\"\\\"\" ", name, " \"\\\"\""));
      return absl::StrCat(name, "-quoted");
    }
    Use("string");
    if (!lengths) return std::string("string");
    if (min->has_value() && max->has_value() && **min > **max) {
      return Refuse(pointer + "/minLength", "is greater than maxLength");
    }
    const std::string bounds = max->has_value()
                                   ? absl::StrCat("{", min->value_or(0), ",", **max, "}")
                                   : absl::StrCat("{", **min, ",}");
    return Rule(absl::StrCat("\"\\\"\" char", bounds, " \"\\\"\""));
  }

  // An integer bound (`minimum` and so on), as an int64 (rounded inward for a non-integer).
  absl::StatusOr<std::optional<int64_t>> Bound(const Json& s, const char* key,
                                               const std::string& pointer, bool lower) {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    const std::string at = absl::StrCat(pointer, "/", key);
    if (!v.is_number()) return Refuse(at, "must be a number");
    const double d = v.get<double>();
    if (std::fabs(d) > static_cast<double>(kMaxBound)) {
      return Refuse(at, absl::StrCat("bounds past +-", kMaxBound, " not supported"));
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    return static_cast<int64_t>(lower ? std::ceil(d) : std::floor(d));
  }

  absl::StatusOr<std::string> Integer(const Json& s, const std::string& pointer) {
    std::optional<int64_t> lo;
    std::optional<int64_t> hi;
    for (const auto& [key, lower, exclusive] :
         {std::tuple{"minimum", true, false}, std::tuple{"exclusiveMinimum", true, true},
          std::tuple{"maximum", false, false}, std::tuple{"exclusiveMaximum", false, true}}) {
      absl::StatusOr<std::optional<int64_t>> b = Bound(s, key, pointer, lower);
      if (!b.ok()) return b.status();
      if (!b->has_value()) continue;
      int64_t v = **b;
      const Json& raw = s[key];
      const bool integral =
          raw.is_number_integer() || std::floor(raw.get<double>()) == raw.get<double>();
      if (exclusive && integral) v += lower ? 1 : -1;
      if (lower) {
        lo = lo ? std::max(*lo, v) : v;
      } else {
        hi = hi ? std::min(*hi, v) : v;
      }
    }
    if (!lo && !hi) return Use("integer");
    if (lo && hi && *lo > *hi) return Refuse(pointer + "/minimum", "no integer is in the bounds");
    return Rule(IntegerRange(lo, hi));
  }

  absl::StatusOr<std::string> Number(const Json& s, const std::string& pointer) {
    for (const char* key : {"maximum", "exclusiveMaximum"}) {
      if (s.contains(key)) {
        return Refuse(absl::StrCat(pointer, "/", key), "not supported for type number");
      }
    }
    const auto zero = [&](const char* key) -> absl::StatusOr<bool> {
      if (!s.contains(key)) return false;
      if (!s[key].is_number() || s[key].get<double>() != 0) {
        return Refuse(absl::StrCat(pointer, "/", key),
                      "only 0 supported for type number (integer bounds: type integer)");
      }
      return true;
    };
    absl::StatusOr<bool> min0 = zero("minimum");
    if (!min0.ok()) return min0.status();
    absl::StatusOr<bool> xmin0 = zero("exclusiveMinimum");
    if (!xmin0.ok()) return xmin0.status();
    if (!*min0 && !*xmin0) return Use("number");
    Use("fraction");
    if (*xmin0) {  // > 0: a non-zero integer part, or a fraction with a non-zero digit; no
                   // exponent, as 1e-999 would read as 0
      return Rule("[1-9] [0-9]{0,18} fraction? | \"0.\" \"0\"{0,14} [1-9] [0-9]{0,14}");
    }
    return Rule("( \"0\" | [1-9] [0-9]{0,18} ) fraction? " + Use("exponent") + "?");
  }

  absl::StatusOr<std::string> Object(const Json& s, const std::string& pointer, int depth) {
    std::vector<std::pair<std::string, const Json*>> props;  // in the schema's order
    static const Json kAny = true;
    if (s.contains("properties")) {
      const Json& p = s["properties"];
      if (!p.is_object()) return Refuse(pointer + "/properties", "must be an object");
      for (auto& [name, sub] : p.items()) props.emplace_back(name, &sub);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Refuse(pointer + "/required", "must be an array of names");
      for (const Json& name : r) {
        if (!name.is_string()) return Refuse(pointer + "/required", "must be an array of names");
        required.insert(name.get<std::string>());
      }
      for (const Json& name : r) {  // required but not described: any value
        const std::string n = name.get<std::string>();
        if (std::none_of(props.begin(), props.end(), [&](const auto& p) { return p.first == n; })) {
          props.emplace_back(n, &kAny);
        }
      }
    }
    // Members: each `"key" ws ":" ws value ws`.
    Use("ws");
    std::vector<std::string> members;
    std::vector<bool> must;
    for (const auto& [name, sub] : props) {
      if (sub->is_boolean() && !sub->get<bool>()) {
        if (required.contains(name)) {
          return Refuse(absl::StrCat(pointer, "/properties/", PointerPart(name)),
                        "a required property whose schema is false");
        }
        continue;  // may not appear
      }
      absl::StatusOr<std::string> value =
          Visit(*sub, absl::StrCat(pointer, "/properties/", PointerPart(name)), depth + 1);
      if (!value.ok()) return value.status();
      members.push_back(
          Rule(absl::StrCat(GbnfLiteral(Json(name).dump()), " ws \":\" ws ", *value, " ws")));
      must.push_back(required.contains(name));
    }
    std::string extra;  // a further member, where additionalProperties allows one
    const Json additional = s.value("additionalProperties", Json(true));
    if (!(additional.is_boolean() && !additional.get<bool>())) {
      absl::StatusOr<std::string> value =
          Visit(additional, pointer + "/additionalProperties", depth + 1);
      if (!value.ok()) return value.status();
      extra = Rule(absl::StrCat(Use("string"), " ws \":\" ws ", *value, " ws"));
    }
    // first[i]: members i.. with none written yet; rest[i]: with one written (so each comes
    // after a comma).
    std::string first =
        extra.empty() ? "\"\"" : Rule(absl::StrCat("( ", extra, " ( \",\" ws ", extra, " )* )?"));
    std::string rest = extra.empty() ? "\"\"" : Rule(absl::StrCat("( \",\" ws ", extra, " )*"));
    for (size_t i = members.size(); i-- > 0;) {
      const std::string& m = members[i];
      const std::string next_rest = must[i] ? absl::StrCat("\",\" ws ", m, " ", rest)
                                            : absl::StrCat("( \",\" ws ", m, " )? ", rest);
      const std::string next_first =
          must[i] ? absl::StrCat(m, " ", rest) : absl::StrCat(m, " ", rest, " | ", first);
      rest = Rule(next_rest);
      first = Rule(next_first);
    }
    return Rule(absl::StrCat("\"{\" ws ", first, " \"}\""));
  }

  absl::StatusOr<std::string> Array(const Json& s, const std::string& pointer, int depth) {
    absl::StatusOr<std::optional<int64_t>> min = Count(s, "minItems", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(s, "maxItems", pointer);
    if (!max.ok()) return max.status();
    const int64_t lo = min->value_or(0);
    if (max->has_value() && lo > **max) {
      return Refuse(pointer + "/minItems", "is greater than maxItems");
    }
    Use("ws");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) return Refuse(pointer + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) {
        absl::StatusOr<std::string> v =
            Visit(p[i], absl::StrCat(pointer, "/prefixItems/", i), depth + 1);
        if (!v.ok()) return v.status();
        prefix.push_back(Rule(absl::StrCat(*v, " ws")));
      }
    }
    std::string item;  // the schema of items past the prefix; empty: none may come
    const Json items = s.value("items", Json(true));
    if (!(items.is_boolean() && !items.get<bool>())) {
      absl::StatusOr<std::string> v = Visit(items, pointer + "/items", depth + 1);
      if (!v.ok()) return v.status();
      item = Rule(absl::StrCat(*v, " ws"));
    }
    const int64_t n_prefix = static_cast<int64_t>(prefix.size());
    std::optional<int64_t> hi = *max;
    if (item.empty()) hi = hi ? std::min(*hi, n_prefix) : n_prefix;
    if (lo > hi.value_or(lo)) return Refuse(pointer + "/minItems", "more items than may come");
    // The items past the prefix: from `tail_lo` to `tail_hi` (nullopt: unbounded), after a
    // comma each unless `lead` (the array's first item).
    const auto tail = [&](int64_t tail_lo, std::optional<int64_t> tail_hi, bool lead) {
      if (tail_hi && *tail_hi == 0) return std::string("\"\"");
      const std::string sep = absl::StrCat("( \",\" ws ", item, " )");
      const auto reps = [](int64_t a, std::optional<int64_t> b) {
        return b ? absl::StrCat("{", a, ",", *b, "}") : absl::StrCat("{", a, ",}");
      };
      if (!lead) return Rule(absl::StrCat(sep, reps(tail_lo, tail_hi)));
      const std::string body =
          absl::StrCat(item, " ", sep,
                       reps(std::max<int64_t>(tail_lo - 1, 0),
                            tail_hi ? std::optional(*tail_hi - 1) : std::nullopt));
      return Rule(tail_lo > 0 ? body : absl::StrCat("( ", body, " )?"));
    };
    // Nested from the last prefix item outwards: after k prefix items, the rest.
    std::string after = tail(
        std::max<int64_t>(lo - n_prefix, 0),
        hi ? std::optional(std::max<int64_t>(*hi - n_prefix, 0)) : std::nullopt, n_prefix == 0);
    if (item.empty()) after = "\"\"";
    for (int64_t k = std::min<int64_t>(n_prefix, hi.value_or(n_prefix)); k-- > 0;) {
      const std::string sep = k == 0 ? "" : "\",\" ws ";
      const std::string body = absl::StrCat(sep, prefix[k], " ", after);
      after = Rule(k < lo ? body : absl::StrCat("( ", body, " )?"));
    }
    return Rule(absl::StrCat("\"[\" ws ", after, " \"]\""));
  }

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;  // in the order written
  absl::flat_hash_map<std::string, std::string> by_body_;
  absl::flat_hash_map<std::string, std::string> refs_;
  std::set<std::string> used_;
  std::string regex_rules_;  // the patterns' rules, as RegexToGbnf wrote them
  size_t bytes_ = 0;
  int patterns_ = 0;
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema) {
  const Json root = Json::parse(schema.begin(), schema.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("/: the schema is not JSON");
  try {
    return Converter(root).Run();
  } catch (const Json::exception& e) {  // a keyword of the wrong JSON type somewhere
    return absl::InvalidArgumentError(absl::StrCat("/: not a schema (", e.what(), ")"));
  }
}

std::string JsonObjectGbnf() { return Converter::AnyObject(); }

}  // namespace tpserve::grammar
