#include "server/grammar/matcher.h"

#include <algorithm>
#include <utility>

namespace tpserve::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, int max_stacks)
    : grammar_(std::move(grammar)), max_stacks_(max_stacks) {
  for (int32_t start : grammar_->alternatives[grammar_->root]) {
    Expand(Stack{start}, &stacks_, &can_end_);
  }
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

void Matcher::Expand(Stack stack, std::vector<Stack>* out, bool* can_end) const {
  const std::vector<Element>& elements = grammar_->elements;
  while (!stack.empty()) {
    const int32_t top = stack.back();
    const Element& e = elements[top];
    if (e.kind == Element::Kind::kBytes) {
      out->push_back(std::move(stack));
      return;
    }
    stack.pop_back();
    if (e.kind == Element::Kind::kEnd) continue;  // back to the frame below: where to go on
    // A reference: go on after it once the rule is done (no frame when nothing follows it:
    // a tail call), into each of its alternatives.
    if (elements[top + 1].kind != Element::Kind::kEnd) stack.push_back(top + 1);
    const std::vector<int32_t>& alternatives = grammar_->alternatives[e.rule];
    for (size_t i = 0; i + 1 < alternatives.size(); ++i) {
      Stack branch = stack;
      branch.push_back(alternatives[i]);
      Expand(std::move(branch), out, can_end);
    }
    if (alternatives.empty()) return;  // an empty class: nothing matches
    stack.push_back(alternatives.back());
  }
  *can_end = true;  // every frame done: the sentence is whole
}

bool Matcher::Step(const std::vector<Stack>& stacks, uint8_t byte, std::vector<Stack>* next,
                   bool* can_end) const {
  next->clear();
  *can_end = false;
  bool admitted = false;
  for (const Stack& stack : stacks) {
    const Element& e = grammar_->elements[stack.back()];
    if (byte < e.lo || byte > e.hi) continue;
    admitted = true;
    Stack advanced = stack;
    ++advanced.back();
    Expand(std::move(advanced), next, can_end);
  }
  if (next->size() > 1) {
    std::sort(next->begin(), next->end());
    next->erase(std::unique(next->begin(), next->end()), next->end());
  }
  if (static_cast<int>(next->size()) > max_stacks_) {
    next->clear();
    *can_end = false;
    return false;
  }
  return admitted && (!next->empty() || *can_end);
}

bool Matcher::Accept(uint8_t byte) {
  std::vector<Stack> next;
  bool can_end = false;
  if (!Step(stacks_, byte, &next, &can_end)) return false;
  stacks_ = std::move(next);
  can_end_ = can_end;
  return true;
}

bool Matcher::AcceptBytes(absl::string_view bytes) {
  std::vector<Stack> stacks = stacks_;
  bool can_end = can_end_;
  std::vector<Stack> next;
  for (char c : bytes) {
    if (!Step(stacks, static_cast<uint8_t>(c), &next, &can_end)) return false;
    stacks.swap(next);
  }
  stacks_ = std::move(stacks);
  can_end_ = can_end;
  return true;
}

bool MatchesWhole(std::shared_ptr<const Grammar> grammar, absl::string_view text) {
  Matcher m(std::move(grammar));
  return m.AcceptBytes(text) && m.CanEnd();
}

}  // namespace tpserve::grammar
