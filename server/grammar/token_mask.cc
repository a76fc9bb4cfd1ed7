#include "server/grammar/token_mask.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "absl/container/node_hash_map.h"

#include "absl/time/clock.h"

namespace tpserve::grammar {
namespace {

// How many trie nodes the walk visits between looks at the clock.
constexpr int32_t kNodesPerClockCheck = 4096;

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& never,
                     int32_t eos_id)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())), eos_id_(eos_id) {
  // Sorting the byte strings lays the trie out in preorder: each string's node follows its
  // longest common prefix with the one before.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const bool excluded = (static_cast<size_t>(id) < never.size() && never[id]) ||
                          token_bytes[id].empty() || id == eos_id;
    if (!excluded) order.push_back(id);
  }
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return token_bytes[a] < token_bytes[b]; });
  byte_.push_back(0);
  depth_.push_back(0);
  tokens_begin_.push_back(0);
  std::vector<int32_t> path = {0};  // the nodes of the previous string, root first
  std::string previous;
  for (int32_t id : order) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    while (common < s.size() && common < previous.size() && s[common] == previous[common]) {
      ++common;
    }
    path.resize(common + 1);
    for (size_t i = common; i < s.size(); ++i) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[i]));
      depth_.push_back(static_cast<uint16_t>(std::min<size_t>(i + 1, UINT16_MAX)));
      tokens_begin_.push_back(static_cast<int32_t>(tokens_.size()));
    }
    tokens_.push_back(id);  // on the last node pushed (or reached, for a duplicate)
    previous = s;
  }
  tokens_begin_.push_back(static_cast<int32_t>(tokens_.size()));
  // Subtree ends: a node's subtree runs to the next node no deeper than it.
  const int32_t n = static_cast<int32_t>(byte_.size());
  subtree_end_.assign(n, n);
  std::vector<int32_t> open;
  for (int32_t i = 0; i < n; ++i) {
    while (!open.empty() && depth_[open.back()] >= depth_[i]) {
      subtree_end_[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
}

namespace {

// The walk's grammar states: each distinct stack set once, with its transitions by byte
// memoised (inside a JSON string, say, nearly every byte leads back to the same state, so
// most trie nodes cost a table lookup rather than a matcher step).
class StateTable {
 public:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kRejected = -1;

  explicit StateTable(const Matcher& matcher) : matcher_(matcher) {}

  int32_t Intern(std::vector<Stack> stacks) {
    auto [it, inserted] = ids_.try_emplace(std::move(stacks), static_cast<int32_t>(pool_.size()));
    if (inserted) {
      pool_.push_back(&it->first);
      next_.emplace_back();
      next_.back().fill(kUnknown);
    }
    return it->second;
  }

  // The state after `byte` from `state` (as next * 2 + can_end), or kRejected.
  int32_t Next(int32_t state, uint8_t byte) {
    int32_t& t = next_[state][byte];
    if (t != kUnknown) return t;
    bool can_end = false;
    const int32_t got = matcher_.Step(*pool_[state], byte, &scratch_, &can_end)
                            ? Intern(scratch_) * 2 + (can_end ? 1 : 0)
                            : kRejected;
    next_[state][byte] = got;  // `t` may dangle: Intern grows next_
    return got;
  }

  bool Ended(int32_t state) const { return pool_[state]->empty(); }

 private:
  const Matcher& matcher_;
  // node-stable keys: the pool points into the map
  absl::node_hash_map<std::vector<Stack>, int32_t> ids_;
  std::vector<const std::vector<Stack>*> pool_;
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<Stack> scratch_;
};

}  // namespace

bool TokenTrie::Mask(const Matcher& matcher, TokenBitmask* mask, absl::Time deadline) const {
  mask->assign((static_cast<size_t>(vocab_size_) + 63) / 64, 0);
  auto allow = [mask](int32_t id) { (*mask)[id >> 6] |= uint64_t{1} << (id & 63); };
  if (eos_id_ >= 0 && eos_id_ < vocab_size_ && matcher.CanEnd()) allow(eos_id_);
  if (matcher.Done()) return true;
  StateTable table(matcher);
  // state[d]: the state after the first d bytes of the current node's string.
  std::vector<int32_t> state(2);
  state[0] = table.Intern(matcher.stacks());
  const int32_t n = static_cast<int32_t>(byte_.size());
  int32_t i = 1;
  int32_t until_clock = kNodesPerClockCheck;
  while (i < n) {
    if (--until_clock == 0) {
      if (absl::Now() > deadline) return false;
      until_clock = kNodesPerClockCheck;
    }
    const size_t d = depth_[i];
    if (state.size() <= d) state.resize(d + 1);
    const int32_t next = table.Next(state[d - 1], byte_[i]);
    if (next == StateTable::kRejected) {
      i = subtree_end_[i];  // no token with this prefix is allowed
      continue;
    }
    state[d] = next / 2;
    for (int32_t t = tokens_begin_[i]; t < tokens_begin_[i + 1]; ++t) allow(tokens_[t]);
    i = table.Ended(state[d]) ? subtree_end_[i] : i + 1;  // ended: nothing may follow
  }
  return true;
}

}  // namespace tpserve::grammar
