// Vocab, merge-rule parsing and MergeTable, shared by both BPE models.
#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/model/tokenizer/bpe.h"

namespace tpserve::model {

std::shared_ptr<Vocab> Vocab::FromTokens(std::vector<std::string> tokens, int32_t unk_id) {
  auto vocab = std::make_shared<Vocab>();
  vocab->tokens = std::move(tokens);
  vocab->unk_id = unk_id;
  vocab->ids.reserve(vocab->tokens.size());
  for (size_t i = 0; i < vocab->tokens.size(); ++i) {
    vocab->ids.emplace(vocab->tokens[i], static_cast<int32_t>(i));
  }
  return vocab;
}

absl::StatusOr<std::vector<MergeRule>> ParseMergeLines(const std::vector<std::string>& lines) {
  std::vector<MergeRule> rules;
  rules.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge ", i, " '", line, "' is not two tokens separated by a space"));
    }
    rules.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return rules;
}

absl::StatusOr<MergeTable> MergeTable::Create(const Vocab& vocab,
                                              const std::vector<MergeRule>& rules) {
  MergeTable table;
  table.pairs_.reserve(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    const auto& [left, right] = rules[i];
    const int32_t l = vocab.Find(left), r = vocab.Find(right);
    const int32_t merged = vocab.Find(absl::StrCat(left, right));
    if (l < 0 || r < 0 || merged < 0) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", i, " '", left, " ", right,
                                                     "' uses a token missing from the vocabulary"));
    }
    // A repeated pair takes its last rank, as Hugging Face's map does.
    table.pairs_.insert_or_assign(Key(l, r), Target{static_cast<int32_t>(i), merged});
  }
  return table;
}

void MergeTable::Merge(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& ids = *symbols;
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  // A doubly linked list over the symbols; a merged-away symbol gets id -1.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int pos) {
    const int nx = next[pos];
    if (pos < 0 || nx < 0) return;
    if (const Target* t = Find(ids[pos], ids[nx])) {
      queue.push({t->rank, pos, ids[pos], ids[nx], t->merged_id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int nx = next[c.pos];
    // Stale when either side has merged since the candidate was queued.
    if (ids[c.pos] != c.left || nx < 0 || ids[nx] != c.right) continue;
    ids[c.pos] = c.merged;
    ids[nx] = -1;
    next[c.pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  int out = 0;
  for (int i = 0; i >= 0; i = next[i]) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace tpserve::model
