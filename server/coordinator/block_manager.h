// BlockManager: the coordinator's map of the world's paged KV cache. It owns the physical KV
// block ids [0, total) that every worker holds (the capacity is the smallest worker's) and
// hands them to sequences' block tables. Workers never allocate: a Step carries each
// sequence's block table.
//
// With prefix caching, a full block is also known by its content: a key chained from its
// parent block's key and its tokens (checked against the tokens on a match, so a hash
// collision cannot share the wrong KV). A new sequence shares the longest cached run of its
// leading full blocks (reference counted) and computes only the rest. A block no table holds
// any more stays cached but evictable, in LRU order, under the same capacity: allocation takes
// a never-cached free block first, then evicts the least recently used cached one, so cached
// blocks go before any sequence is preempted. Only full blocks are shared, and a sequence
// writes only past its cached prefix, so no block is written while another table reads it.
// The cache lives and dies with the manager (a new world's caches are new: a new manager).
// Not thread-safe: owned by the scheduler's thread.
#ifndef TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_
#define TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "server/coordinator/sequence.h"

namespace tpserve::coordinator {

class BlockManager {
 public:
  // `total_blocks` blocks of `block_size` tokens each.
  BlockManager(int64_t total_blocks, int64_t block_size, bool prefix_caching = false);

  // Blocks a sequence needs to hold `tokens` positions.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Grows `table` until it covers `tokens` positions, with blocks of its own. False (and
  // `table` unchanged) when too few blocks are free or evictable.
  bool GrowTo(int64_t tokens, std::vector<int32_t>* table);
  // How many free blocks GrowTo(tokens, table) would take.
  int64_t Missing(int64_t tokens, const std::vector<int32_t>& table) const;
  // Drops `table`'s hold on each of its blocks and clears it: a block no table holds is free
  // again, or, when cached, evictable (the table's last blocks are evicted first).
  void Release(std::vector<int32_t>* table);

  // Prefix caching (no-ops when off). MatchPrefix: `seq` (no blocks yet) shares the longest
  // cached run of its leading full blocks that covers at most `max_tokens` positions; returns
  // the positions covered, and records their keys in seq->block_keys.
  int64_t MatchPrefix(Sequence* seq, int64_t max_tokens);
  // Caches seq's full blocks within [0, seq->computed) that are not cached yet (a block whose
  // content another block already caches stays the sequence's own).
  void Register(Sequence* seq);

  // Blocks GrowTo can take: free, or cached and evictable.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t total_blocks() const { return total_; }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t cached_blocks() const { return static_cast<int64_t>(cache_.size()); }
  int64_t evictions() const { return evictions_; }
  // Every block free, evictable or held (and held exactly `refs` times), every cached block
  // found under its key; Internal naming the first broken rule otherwise. For tests.
  absl::Status CheckInvariants() const;
  int32_t refs(int32_t block) const { return blocks_[block].refs; }
  // The evictable (cached, unheld) blocks, the next to be evicted first. For tests.
  std::vector<int32_t> EvictionOrder() const { return {lru_.begin(), lru_.end()}; }

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;
    uint64_t key = 0;                      // when cached
    std::list<int32_t>::iterator lru_pos;  // when cached and refs == 0
  };
  struct CachedContent {
    int32_t block = 0;
    uint64_t parent = 0;          // the previous block's key (0 for the first)
    std::vector<int32_t> tokens;  // [block_size]
  };

  // A block for a table: free first, else the least recently used cached one.
  int32_t Take();
  // The key of full block `index` of `seq` after a parent key (the tokens at
  // [index * block_size, (index + 1) * block_size)).
  uint64_t KeyOf(const Sequence& seq, int64_t index, uint64_t parent) const;
  bool SameContent(const CachedContent& c, const Sequence& seq, int64_t index,
                   uint64_t parent) const;

  const int64_t total_;
  const int64_t block_size_;
  const bool prefix_caching_;
  std::vector<Block> blocks_;  // [total]
  std::vector<int32_t> free_;  // never-cached, unheld; LIFO: a just-freed block first
  std::list<int32_t> lru_;     // cached, unheld; least recently released first
  absl::flat_hash_map<uint64_t, CachedContent> cache_;  // key → the block holding it
  int64_t evictions_ = 0;
};

}  // namespace tpserve::coordinator

#endif  // TPSERVE_SERVER_COORDINATOR_BLOCK_MANAGER_H_
