#include "server/model/tokenizer/tokenizer_added_tokens.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

// Unicode White_Space (Rust's char::is_whitespace, which lstrip/rstrip use).
bool IsWhiteSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// The start of the run of whitespace ending at `end`.
size_t WhiteSpaceRunStart(std::string_view s, size_t floor, size_t end) {
  while (end > floor) {
    size_t start = end - 1;
    while (start > floor && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const size_t len = Utf8SequenceLength(s, start);
    if (len != end - start || !IsWhiteSpace(DecodeUtf8At(s, start, len))) break;
    end = start;
  }
  return end;
}

// The end of the run of whitespace starting at `begin`.
size_t WhiteSpaceRunEnd(std::string_view s, size_t begin) {
  while (begin < s.size()) {
    const size_t len = Utf8SequenceLength(s, begin);
    if (len == 0 || !IsWhiteSpace(DecodeUtf8At(s, begin, len))) break;
    begin += len;
  }
  return begin;
}

}  // namespace

absl::StatusOr<AddedTokenMatcher> AddedTokenMatcher::Create(std::vector<AddedToken> tokens) {
  AddedTokenMatcher matcher;
  matcher.tokens_ = std::move(tokens);
  for (size_t i = 0; i < matcher.tokens_.size(); ++i) {
    const AddedToken& t = matcher.tokens_[i];
    if (t.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("added token ", t.id, " is empty"));
    }
    matcher.by_first_byte_[static_cast<uint8_t>(t.content[0])].push_back(static_cast<int>(i));
  }
  for (auto& bucket : matcher.by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int a, int b) {
      return matcher.tokens_[a].content.size() > matcher.tokens_[b].content.size();
    });
  }
  return matcher;
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text,
                                                  absl::Span<const ByteRange> literal) const {
  std::vector<TextSegment> out;
  size_t emitted = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  size_t next_literal = 0;  // the first range of `literal` that ends after `pos`
  while (pos < text.size()) {
    while (next_literal < literal.size() && literal[next_literal].end <= pos) ++next_literal;
    // A match must end at or before the next literal range (text.size() when none).
    size_t limit = text.size();
    if (next_literal < literal.size()) {
      if (literal[next_literal].begin <= pos) {  // inside a literal range: skip it
        pos = literal[next_literal].end;
        continue;
      }
      limit = literal[next_literal].begin;
    }
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* match = nullptr;
    for (int index : bucket) {  // longest first
      const AddedToken& t = tokens_[index];
      if (t.content.size() <= limit - pos && text.compare(pos, t.content.size(), t.content) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + match->content.size();
    if (match->lstrip) begin = WhiteSpaceRunStart(text, emitted, begin);
    if (match->rstrip) end = WhiteSpaceRunEnd(text, end);
    if (begin > emitted) out.push_back({text.substr(emitted, begin - emitted), -1});
    out.push_back({std::string_view(), match->id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
  return out;
}

}  // namespace tpserve::model
