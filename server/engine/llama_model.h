// LlamaModel: one tensor-parallel rank's slice of a Llama-family decoder, loaded into a
// Backend, and its forward pass over a StepBatch. Per layer it runs
//   RMSNorm → QKV (column-parallel) → RoPE → paged attention over its own heads →
//   O (row-parallel) → ALL-REDUCE → RMSNorm → gate/up (column-parallel) → SwiGLU →
//   down (row-parallel) → ALL-REDUCE
// and ends with the final norm and the vocab-parallel LM head, whose slices are all-gathered.
// A world of one rank is the plain model. Not thread-safe: one step at a time.
#ifndef TPSERVE_SERVER_ENGINE_LLAMA_MODEL_H_
#define TPSERVE_SERVER_ENGINE_LLAMA_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kv_block.h"
#include "server/comm/communicator.h"
#include "server/engine/backend.h"
#include "server/engine/step_batch.h"
#include "server/engine/step_validator.h"
#include "server/model/plan/shard_plan.h"
#include "server/model/weights/model_config.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::engine {

struct EngineOptions {
  int64_t max_batch_tokens = 512;         // tokens in one step (prefill chunks + decodes)
  int64_t max_logit_rows = 256;           // sequences that want logits in one step
  int64_t kv_block_size = kKvBlockSize;   // tokens per KV block
  int64_t kv_budget_bytes = 256ll << 20;  // memory for the KV cache on this rank
  int64_t kv_blocks = 0;                  // when > 0: exactly this many blocks (budget unused)
  bool dequantize = false;  // exact mode: every weight dequantised to the backend's weight_dtype
                            // at load (else kept in its file's blocks where the backend can)
  // The canonical path: the row-parallel projections (wo, w_down) as exact fixed-point sums
  // (Backend::MatmulExact, an int64 all-reduce), so that every world size and split gives the
  // same bits (kernels/cpu/quant/fixed_sum.h). Taken where the backend sums Q8_0 exactly, the
  // heads are whole blocks (head_dim % 32 == 0) and not in exact mode; else float sums.
  bool tp_invariant = true;
  // Polled by Load between tensors (and chunks of a large one); once it returns true, Load
  // abandons the load and returns Cancelled. Empty: never. Not kept past Load.
  std::function<bool()> cancelled;
};

class LlamaModel {
 public:
  // Reads this rank's slice of every weight from `weights` (only that slice is read; kept in
  // its blocks or dequantised, see WeightLoader) and uploads it into `backend`, sizes the KV cache
  // from the budget and the workspaces from the options. `backend` and `comm` must outlive the
  // model. Cancelled when options.cancelled abandons the load.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const model::WeightSource& weights,
                                                          const model::ShardPlan& plan,
                                                          Backend* backend,
                                                          comm::Communicator* comm,
                                                          const EngineOptions& options);

  // A model of `config`'s shape with synthetic weights made in `backend` (FillRandom from
  // `seed`; norm weights 1): for benchmarks of shapes whose files are not at hand.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> CreateRandom(
      const model::ModelConfig& config, const model::ShardPlan& plan, Backend* backend,
      comm::Communicator* comm, const EngineOptions& options, uint64_t seed);

  // Runs one step. `logits` receives, on rank 0, [batch.num_logit_rows(), vocab_size] f32: for
  // each sequence in batch order, the logits of its last new token (want_logits) or of every
  // new token (all_logits). Other ranks only send their slices and get `logits` empty.
  // InvalidArgument, before any work, for a batch outside step_limits() (ValidateStep).
  absl::Status Forward(const StepBatch& batch, std::vector<float>* logits);
  // What Forward takes: this rank's vocabulary, context, KV cache and workspaces.
  const StepLimits& step_limits() const { return step_limits_; }

  const model::ModelConfig& config() const { return config_; }
  const model::ShardPlan& plan() const { return plan_; }
  int64_t kv_blocks() const { return kv_shape_.num_blocks; }
  int64_t kv_block_size() const { return kv_shape_.block_size; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t kv_bytes() const { return kv_bytes_; }
  // Whether the row-parallel projections are exact sums (EngineOptions::tp_invariant taken).
  bool exact_sums() const { return exact_sums_; }

 private:
  // Weight matrices are the backend's weight dtype, norms f32; see backend.h.
  struct Layer {
    Tensor attn_norm;  // [1, d_model]
    Tensor wqkv;       // [(q_local + 2 kv_local) * head_dim, d_model]: wq rows, wk rows, wv rows
    Tensor wo;         // [d_model, q_local * head_dim]
    Tensor ffn_norm;   // [1, d_model]
    Tensor w_gate_up;  // [2 * ffn_local, d_model]: gate rows, then up rows
    Tensor w_down;     // [d_model, ffn_local]
  };
  // T = max_batch_tokens, R = max_logit_rows, V = vocab_slice_max (the largest rank's vocab
  // slice; the whole vocabulary in a world of one). f32 unless marked "act" (the backend's
  // activation dtype).
  struct Workspace {
    Tensor x;         // [T, d_model] residual stream
    Tensor h;         // [T, d_model] act, normed
    Tensor qkv;       // [T, (q_local + 2 kv_local) * head_dim]
    Tensor attn;      // [T, q_local * head_dim] act
    Tensor proj;      // [T, d_model] partial sums of the row-parallel projections
    Tensor sums;      // [T, d_model] int64: their exact sums (exact_sums_ only)
    Tensor gate_up;   // [T, 2 * ffn_local]
    Tensor act;       // [T, ffn_local] act
    Tensor sel;       // [R, d_model] residual rows that want logits
    Tensor sel_h;     // [R, d_model] act, those rows normed
    Tensor logits;    // [R, V] this rank's slice, padded to V columns
    Tensor gathered;  // [P * R, V] every rank's slice, rank-major (P > 1 only)
  };

  LlamaModel() = default;
  // Checks the arguments and fills the fields every constructor shares.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Begin(const model::ModelConfig& config,
                                                           const model::ShardPlan& plan,
                                                           Backend* backend,
                                                           comm::Communicator* comm,
                                                           const EngineOptions& options);
  // Sizes the KV cache, the RoPE tables and the workspaces once the weights are in.
  absl::Status Finish();
  absl::Status LoadWeights(const model::WeightSource& weights);
  absl::Status MakeRandomWeights(uint64_t seed);
  int64_t vocab_slice_max() const;
  absl::Status AllocateWorkspace();
  absl::Status GatherLogits(int64_t rows, std::vector<float>* logits);
  // out = x · wᵀ summed over the ranks (a row-parallel projection): exact sums over granules of
  // `granule` blocks and an int64 all-reduce when exact_sums_, else float partials and a float
  // all-reduce.
  absl::Status RowParallel(const Tensor& x, const Tensor& w, int64_t granule, Tensor out);

  model::ModelConfig config_;
  model::ShardPlan plan_;
  EngineOptions options_;
  Backend* backend_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  KvCacheShape kv_shape_;
  StepLimits step_limits_;

  Tensor token_embd_;   // [vocab, d_model] (replicated)
  Tensor output_norm_;  // [1, d_model]
  Tensor lm_head_;      // [V, d_model]: this rank's vocab rows, zero rows up to V
  std::vector<Layer> layers_;
  Workspace ws_;
  int64_t weight_bytes_ = 0;
  int64_t kv_bytes_ = 0;
  bool exact_sums_ = false;
  int64_t wo_granule_ = 1;    // blocks of 32 per granule of wo's exact sums: a head's
  int64_t down_granule_ = 1;  // and of w_down's: CanonicalFfnGranule / 32

  std::vector<float> host_gathered_;  // [P, R, V]
};

}  // namespace tpserve::engine

#endif  // TPSERVE_SERVER_ENGINE_LLAMA_MODEL_H_
