#include "server/coordinator/block_manager.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "glog/logging.h"

namespace tpserve::coordinator {

BlockManager::BlockManager(int64_t total_blocks, int64_t block_size, bool prefix_caching)
    : total_(total_blocks),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      blocks_(static_cast<size_t>(std::max<int64_t>(0, total_blocks))) {
  CHECK_GE(total_blocks, 0);
  CHECK_GT(block_size, 0);
  free_.reserve(static_cast<size_t>(total_blocks));
  // Highest id at the bottom, so the first allocations take 0, 1, 2, ...
  for (int64_t b = total_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockManager::Missing(int64_t tokens, const std::vector<int32_t>& table) const {
  return std::max<int64_t>(0, BlocksFor(tokens) - static_cast<int64_t>(table.size()));
}

int32_t BlockManager::Take() {
  int32_t b = 0;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    CHECK(!lru_.empty()) << "no block to take";
    b = lru_.front();
    lru_.pop_front();
    cache_.erase(blocks_[b].key);
    blocks_[b].cached = false;
    ++evictions_;
  }
  blocks_[b].refs = 1;
  return b;
}

bool BlockManager::GrowTo(int64_t tokens, std::vector<int32_t>* table) {
  const int64_t missing = Missing(tokens, *table);
  if (missing > free_blocks()) return false;
  for (int64_t i = 0; i < missing; ++i) table->push_back(Take());
  return true;
}

void BlockManager::Release(std::vector<int32_t>* table) {
  // Reverse order: the table's first block is released last, so it is reused (free list) or
  // evicted (LRU) last.
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    Block& block = blocks_[*it];
    CHECK_GT(block.refs, 0) << "block " << *it << " released more often than held";
    if (--block.refs > 0) continue;
    if (block.cached) {
      block.lru_pos = lru_.insert(lru_.end(), *it);
    } else {
      free_.push_back(*it);
    }
  }
  table->clear();
}

uint64_t BlockManager::KeyOf(const Sequence& seq, int64_t index, uint64_t parent) const {
  std::vector<int32_t> tokens(static_cast<size_t>(block_size_));
  for (int64_t i = 0; i < block_size_; ++i) tokens[i] = seq.token_at(index * block_size_ + i);
  // 0 means "no parent"; a key that comes out 0 is moved off it.
  const uint64_t key = absl::HashOf(parent, absl::MakeConstSpan(tokens));
  return key == 0 ? 1 : key;
}

bool BlockManager::SameContent(const CachedContent& c, const Sequence& seq, int64_t index,
                               uint64_t parent) const {
  if (c.parent != parent) return false;
  for (int64_t i = 0; i < block_size_; ++i) {
    if (c.tokens[i] != seq.token_at(index * block_size_ + i)) return false;
  }
  return true;
}

int64_t BlockManager::MatchPrefix(Sequence* seq, int64_t max_tokens) {
  CHECK(seq->block_table.empty()) << "sequence " << seq->id << " already holds blocks";
  seq->block_keys.clear();
  if (!prefix_caching_) return 0;
  uint64_t parent = 0;
  for (int64_t index = 0; (index + 1) * block_size_ <= max_tokens; ++index) {
    const uint64_t key = KeyOf(*seq, index, parent);
    const auto found = cache_.find(key);
    if (found == cache_.end() || !SameContent(found->second, *seq, index, parent)) break;
    Block& block = blocks_[found->second.block];
    if (block.refs++ == 0) lru_.erase(block.lru_pos);
    seq->block_table.push_back(found->second.block);
    seq->block_keys.push_back(key);
    parent = key;
  }
  return static_cast<int64_t>(seq->block_table.size()) * block_size_;
}

void BlockManager::Register(Sequence* seq) {
  if (!prefix_caching_) return;
  const int64_t full =
      std::min<int64_t>(seq->computed / block_size_, static_cast<int64_t>(seq->block_table.size()));
  for (auto index = static_cast<int64_t>(seq->block_keys.size()); index < full; ++index) {
    const uint64_t parent = index == 0 ? 0 : seq->block_keys[index - 1];
    const uint64_t key = KeyOf(*seq, index, parent);
    seq->block_keys.push_back(key);
    const int32_t b = seq->block_table[index];
    if (cache_.contains(key) || blocks_[b].cached) continue;  // another block holds it
    CachedContent content{b, parent, std::vector<int32_t>(static_cast<size_t>(block_size_))};
    for (int64_t i = 0; i < block_size_; ++i) {
      content.tokens[i] = seq->token_at(index * block_size_ + i);
    }
    cache_.emplace(key, std::move(content));
    blocks_[b].cached = true;
    blocks_[b].key = key;
  }
}

absl::Status BlockManager::CheckInvariants() const {
  std::vector<int> seen(blocks_.size(), 0);
  for (int32_t b : free_) {
    ++seen[b];
    if (blocks_[b].refs != 0 || blocks_[b].cached) {
      return absl::InternalError(absl::StrCat("free block ", b, " is held or cached"));
    }
  }
  for (int32_t b : lru_) {
    ++seen[b];
    if (blocks_[b].refs != 0 || !blocks_[b].cached) {
      return absl::InternalError(absl::StrCat("evictable block ", b, " is held or not cached"));
    }
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (blocks_[b].refs > 0) ++seen[b];
    if (seen[b] != 1) {
      return absl::InternalError(
          absl::StrCat("block ", b, " is in ", seen[b], " of free, evictable and held"));
    }
    if (blocks_[b].cached) {
      const auto found = cache_.find(blocks_[b].key);
      if (found == cache_.end() || found->second.block != static_cast<int32_t>(b)) {
        return absl::InternalError(absl::StrCat("cached block ", b, " is not under its key"));
      }
    }
  }
  for (const auto& [key, content] : cache_) {
    if (!blocks_[content.block].cached || blocks_[content.block].key != key) {
      return absl::InternalError(
          absl::StrCat("key ", key, " names block ", content.block, ", which does not hold it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve::coordinator
