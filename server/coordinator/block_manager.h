// BlockManager: the coordinator's map of the world's paged KV cache. It owns the free list of
// the physical KV block ids [0, total) that every worker holds (the capacity is the smallest
// worker's) and hands them to sequences' block tables. Workers never allocate: a Step carries
// each sequence's block table. Not thread-safe: owned by the scheduler's thread.
#ifndef TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_
#define TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_

#include <cstdint>
#include <vector>

namespace tpserve::coordinator {

class BlockManager {
 public:
  // `total_blocks` blocks of `block_size` tokens each.
  BlockManager(int64_t total_blocks, int64_t block_size);

  // Blocks a sequence needs to hold `tokens` positions.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Grows `table` until it covers `tokens` positions. False (and `table` unchanged) when the
  // free list is too short.
  bool GrowTo(int64_t tokens, std::vector<int32_t>* table);
  // How many free blocks GrowTo(tokens, table) would take.
  int64_t Missing(int64_t tokens, const std::vector<int32_t>& table) const;
  // Returns every block of `table` to the free list and clears it.
  void Release(std::vector<int32_t>* table);

  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t total_blocks() const { return total_; }
  int64_t block_size() const { return block_size_; }

 private:
  const int64_t total_;
  const int64_t block_size_;
  std::vector<int32_t> free_;  // LIFO: a just-freed block is reused first
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_
