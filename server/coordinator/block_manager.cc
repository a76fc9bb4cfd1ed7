#include "server/coordinator/block_manager.h"

#include <algorithm>

#include "glog/logging.h"

namespace tpserve::coordinator {

BlockManager::BlockManager(int64_t total_blocks, int64_t block_size)
    : total_(total_blocks), block_size_(block_size) {
  CHECK_GE(total_blocks, 0);
  CHECK_GT(block_size, 0);
  free_.reserve(static_cast<size_t>(total_blocks));
  // Highest id at the bottom, so the first allocations take 0, 1, 2, ...
  for (int64_t b = total_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockManager::Missing(int64_t tokens, const std::vector<int32_t>& table) const {
  return std::max<int64_t>(0, BlocksFor(tokens) - static_cast<int64_t>(table.size()));
}

bool BlockManager::GrowTo(int64_t tokens, std::vector<int32_t>* table) {
  const int64_t missing = Missing(tokens, *table);
  if (missing > free_blocks()) return false;
  for (int64_t i = 0; i < missing; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::Release(std::vector<int32_t>* table) {
  // Reverse order: the sequence's first block ends on top and is reused first.
  for (auto it = table->rbegin(); it != table->rend(); ++it) free_.push_back(*it);
  CHECK_LE(free_blocks(), total_) << "a block was released twice";
  table->clear();
}

}  // namespace tpserve::coordinator
