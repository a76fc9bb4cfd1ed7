// UTF-8 helpers shared by the tokenizers and the streaming detokenizer: validation, code
// point iteration and lossy decoding. Stateless free functions; thread-safe.
#ifndef TPSERVE_SERVER_MODEL_TOKENIZER_UTF8_H_
#define TPSERVE_SERVER_MODEL_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpserve::model {

// The length of the well-formed UTF-8 sequence starting at s[pos] (1-4), or 0 when the bytes
// there are not a complete, well-formed sequence (invalid or truncated).
size_t Utf8SequenceLength(std::string_view s, size_t pos);

// Decodes the well-formed sequence at s[pos] (Utf8SequenceLength must be > 0).
char32_t DecodeUtf8At(std::string_view s, size_t pos, size_t len);

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// True when `s` is entirely well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
// On failure and when `error_offset` is not null, stores the offset of the first bad byte.
bool IsValidUtf8(std::string_view s, size_t* error_offset = nullptr);

// The length of the longest prefix of `s` that can be emitted now: every complete sequence,
// and every invalid byte (which lossy decoding will replace), but not a trailing incomplete
// sequence that later bytes could still complete.
size_t Utf8CompletePrefixLength(std::string_view s);

// Converts `s` to valid UTF-8, replacing each maximal ill-formed subpart with U+FFFD (the
// Unicode "substitution of maximal subparts" practice, as Rust's from_utf8_lossy does).
std::string Utf8Lossy(std::string_view s);

// Python's str.isspace() for one code point (what Jinja's trim and str.strip() remove).
bool IsPythonSpace(char32_t cp);

// Python's str.strip(): removes leading and trailing IsPythonSpace code points of valid UTF-8.
std::string_view PythonStrip(std::string_view s);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_TOKENIZER_UTF8_H_
