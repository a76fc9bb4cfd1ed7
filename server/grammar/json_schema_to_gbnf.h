// JsonSchemaToGbnf: a JSON schema as GBNF rules (gbnf.h) whose language is JSON text that
// the schema accepts; and JsonObjectGbnf, any JSON object (response_format json_object).
//
// Output is JSON with optional, bounded whitespace between tokens (`ws`: nothing, a space, or
// a newline and up to 24 spaces/tabs): a model may write compact or indented JSON, and can
// never loop on whitespace. Object properties come in the schema's `properties` order
// (required ones always, optional ones each optional), then, where additionalProperties
// allows, further properties.
//
// Supported keywords (each enforced exactly): type (one, or a list; "null" included),
// properties, required, additionalProperties (false, true, or a schema; absent = true as in
// JSON schema), enum, const, items, prefixItems, minItems, maxItems, $ref (to "#", "#/$defs/x"
// or "#/definitions/x", recursion included) with $defs/definitions, anyOf, oneOf (as anyOf:
// the alternatives are the schema's own), allOf (objects merged; otherwise refused), string
// minLength / maxLength / pattern (regex_to_gbnf.h, on the JSON-escaped contents) / format
// (date, time, date-time, email, uuid), integer minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (digit-range rules, exact), number minimum 0 / exclusiveMinimum 0 (sign
// rules). Annotations (title, description, default, examples, $schema, $id, $comment,
// readOnly, writeOnly, deprecated) are ignored as they constrain nothing. Every other
// keyword, and a bound that cannot be expressed (e.g. number maximum 3.5), is refused:
// InvalidArgument whose message starts with the keyword's JSON pointer ("/properties/a/
// multipleOf: not supported").
#ifndef TPSERVE_SERVER_GRAMMAR_JSON_SCHEMA_TO_GBNF_H_
#define TPSERVE_SERVER_GRAMMAR_JSON_SCHEMA_TO_GBNF_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve::grammar {

// GBNF text with start rule `root` for `schema` (JSON text); InvalidArgument for a schema
// that is not JSON, not a schema, or uses what is refused above.
absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema);

// GBNF text with start rule `root`: any JSON object (values any JSON, nested).
std::string JsonObjectGbnf();

}  // namespace tpserve::grammar

#endif  // TPSERVE_SERVER_GRAMMAR_JSON_SCHEMA_TO_GBNF_H_
