#include "server/grammar/code_set.h"

#include <algorithm>

namespace tpserve::grammar {

CodeSet Normalize(CodeSet ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeSet merged;
  for (const Range& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  CodeSet out;
  for (const Range& r : merged) {  // less the surrogates
    if (r.second < kSurrogateLo || r.first > kSurrogateHi) {
      out.push_back(r);
      continue;
    }
    if (r.first < kSurrogateLo) out.emplace_back(r.first, kSurrogateLo - 1);
    if (r.second > kSurrogateHi) out.emplace_back(kSurrogateHi + 1, r.second);
  }
  return out;
}

CodeSet Negate(const CodeSet& s) {
  CodeSet out;
  uint32_t next = 0;
  for (const Range& r : s) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return Normalize(std::move(out));
}

CodeSet Intersect(const CodeSet& a, const CodeSet& b) {
  CodeSet out;
  for (const Range& x : a) {
    for (const Range& y : b) {
      if (x.second >= y.first && x.first <= y.second) {
        out.emplace_back(std::max(x.first, y.first), std::min(x.second, y.second));
      }
    }
  }
  return Normalize(std::move(out));
}

bool Contains(const CodeSet& s, uint32_t cp) {
  return std::any_of(s.begin(), s.end(),
                     [cp](const Range& r) { return r.first <= cp && cp <= r.second; });
}

CodeSet Digits() { return {{'0', '9'}}; }
CodeSet WordChars() { return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
CodeSet Spaces() { return Normalize({{'\t', '\r'}, {' ', ' '}}); }

}  // namespace tpserve::grammar
