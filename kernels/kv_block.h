// File: kernels/kv_block.h
//
// kKvBlockSize: token positions per block of the paged KV cache, one value for the whole
// program. The kernels' cache layout (CPU and CUDA) takes it as the default block size, the
// engine's KvCacheShape and EngineOptions, the coordinator's WorkerPoolOptions (sent to the
// workers in Init) and the generate command size their caches with it. A constant; thread-safe.
#ifndef TPSERVE_KERNELS_KV_BLOCK_H_
#define TPSERVE_KERNELS_KV_BLOCK_H_

#include <cstdint>

namespace tpserve {

// Token positions per KV cache block: position p of a sequence lives in block p / kKvBlockSize
// of its block table, slot p % kKvBlockSize.
inline constexpr int32_t kKvBlockSize = 16;

}  // namespace tpserve

#endif  // TPSERVE_KERNELS_KV_BLOCK_H_
