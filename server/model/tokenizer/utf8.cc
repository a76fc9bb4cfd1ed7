#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {
namespace {

// The length of the maximal prefix of a well-formed sequence at s[pos] that is present
// (1 for a lone bad byte), and whether that prefix is a complete sequence.
struct Subpart {
  size_t len;
  bool complete;
};

Subpart MaximalSubpart(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {1, true};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false};
  }
  size_t i = 1;
  for (; i < need; ++i) {
    if (pos + i >= s.size()) return {i, false};
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {i, false};
  }
  return {need, true};
}

}  // namespace

size_t Utf8SequenceLength(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const Subpart p = MaximalSubpart(s, pos);
  return p.complete ? p.len : 0;
}

char32_t DecodeUtf8At(std::string_view s, size_t pos, size_t len) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + i])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s, size_t* error_offset) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = Utf8SequenceLength(s, pos);
    if (len == 0) {
      if (error_offset != nullptr) *error_offset = pos;
      return false;
    }
    pos += len;
  }
  return true;
}

size_t Utf8CompletePrefixLength(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const Subpart p = MaximalSubpart(s, pos);
    // An incomplete but so-far valid sequence at the very end may still be completed.
    if (!p.complete && pos + p.len == s.size() && p.len < 4 &&
        static_cast<uint8_t>(s[pos]) >= 0xC2 && static_cast<uint8_t>(s[pos]) <= 0xF4) {
      return pos;
    }
    pos += p.len;
  }
  return pos;
}

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const Subpart p = MaximalSubpart(s, pos);
    if (p.complete) {
      out.append(s.data() + pos, p.len);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += p.len;
  }
  return out;
}

bool IsPythonSpace(char32_t cp) {
  // Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view PythonStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t len = Utf8SequenceLength(s, begin);
    if (len == 0 || !IsPythonSpace(DecodeUtf8At(s, begin, len))) break;
    begin += len;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back up to the lead byte of the last sequence
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const size_t len = Utf8SequenceLength(s, start);
    if (len != end - start || !IsPythonSpace(DecodeUtf8At(s, start, len))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

}  // namespace tpserve::model
