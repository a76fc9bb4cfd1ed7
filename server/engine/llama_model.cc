#include "server/engine/llama_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/common/status_macros.h"
#include "server/engine/weight_loader.h"

namespace tpserve::engine {
namespace {

std::string LayerName(int64_t layer, const char* part) {
  return absl::StrCat("blk.", layer, ".", part, ".weight");
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Begin(const model::ModelConfig& config,
                                                              const model::ShardPlan& plan,
                                                              Backend* backend,
                                                              comm::Communicator* comm,
                                                              const EngineOptions& options) {
  if (config.attention_bias) {
    return absl::UnimplementedError(absl::StrCat("architecture '", config.architecture,
                                                 "' has attention biases, which the "
                                                 "engine does not support yet"));
  }
  if (comm->world_size() != plan.world_size || comm->rank() != plan.rank) {
    return absl::InvalidArgumentError(absl::StrCat("shard plan is for rank ", plan.rank, "/",
                                                   plan.world_size, " but the communicator is ",
                                                   comm->rank(), "/", comm->world_size()));
  }
  if (options.max_batch_tokens < 1 || options.max_logit_rows < 1 || options.kv_block_size < 1) {
    return absl::InvalidArgumentError(
        "max_batch_tokens, max_logit_rows and kv_block_size must be >= 1");
  }
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->config_ = config;
  m->plan_ = plan;
  m->options_ = options;
  m->backend_ = backend;
  m->comm_ = comm;
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const model::WeightSource& weights,
                                                             const model::ShardPlan& plan,
                                                             Backend* backend,
                                                             comm::Communicator* comm,
                                                             const EngineOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m,
                   Begin(weights.config(), plan, backend, comm, options));
  RETURN_IF_ERROR(m->LoadWeights(weights));
  m->options_.cancelled = nullptr;  // only the load polls it
  weights.ReleaseResidentPages();   // the weights are the backend's now
  RETURN_IF_ERROR(m->Finish());
  return m;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::CreateRandom(
    const model::ModelConfig& config, const model::ShardPlan& plan, Backend* backend,
    comm::Communicator* comm, const EngineOptions& options, uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, Begin(config, plan, backend, comm, options));
  RETURN_IF_ERROR(m->MakeRandomWeights(seed));
  RETURN_IF_ERROR(m->Finish());
  return m;
}

absl::Status LlamaModel::Finish() {
  weight_bytes_ = backend_->allocated_bytes();
  KvCacheShape& kv = kv_shape_;
  kv.n_layers = config_.n_layers;
  kv.block_size = options_.kv_block_size;
  kv.n_kv_heads = plan_.kv_heads_count();
  kv.head_dim = config_.head_dim;
  const int64_t block_bytes = 2 * kv.n_layers * kv.block_size * kv.n_kv_heads * kv.head_dim *
                              DTypeBytes(backend_->activation_dtype());
  kv.num_blocks =
      options_.kv_blocks > 0 ? options_.kv_blocks : options_.kv_budget_bytes / block_bytes;
  if (kv.num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", options_.kv_budget_bytes,
                                                   " is below one KV block (", block_bytes,
                                                   " bytes)"));
  }
  RETURN_IF_ERROR(backend_->InitKvCache(kv));
  kv_bytes_ = kv.num_blocks * block_bytes;

  RopeSettings rope;
  rope.head_dim = config_.head_dim;
  rope.theta = config_.rope_theta;
  rope.style = config_.rope_style;
  rope.scaling = config_.rope_scaling;
  rope.max_position = static_cast<int32_t>(std::min<int64_t>(config_.context_length, 1 << 16));
  RETURN_IF_ERROR(backend_->InitRope(rope));
  step_limits_ = {.vocab_size = config_.vocab_size,
                  .max_positions = rope.max_position,
                  .kv_blocks = kv.num_blocks,
                  .kv_block_size = kv.block_size,
                  .max_batch_tokens = options_.max_batch_tokens,
                  .max_logit_rows = options_.max_logit_rows};
  return AllocateWorkspace();
}

int64_t LlamaModel::vocab_slice_max() const {
  return (config_.vocab_size + plan_.world_size - 1) / plan_.world_size;
}

absl::Status LlamaModel::LoadWeights(const model::WeightSource& weights) {
  const int64_t d = config_.d_model;
  const model::Range all_d{0, d};
  const model::Range q_rows = plan_.q_rows();
  const model::Range kv_rows = plan_.kv_rows();
  const model::Range ffn = plan_.ffn;
  WeightLoader loader(&weights, backend_, options_.dequantize, options_.cancelled);
  // Column-parallel parts: some rows, every column; row-parallel: every row, some columns.
  auto rows_of = [&](const std::string& name, model::Range r) {
    return WeightPart{name, r, all_d};
  };
  auto columns_of = [&](const std::string& name, model::Range c) {
    return WeightPart{name, all_d, c};
  };

  const model::Range vocab_all{0, config_.vocab_size};
  ASSIGN_OR_RETURN(token_embd_,
                   loader.Matrix({rows_of("token_embd.weight", vocab_all)}, config_.vocab_size, d));
  ASSIGN_OR_RETURN(output_norm_, loader.Vector("output_norm.weight", d));
  const char* head_name = config_.tied_embeddings ? "token_embd.weight" : "output.weight";
  if (config_.tied_embeddings && plan_.vocab.size() == config_.vocab_size) {
    lm_head_ = token_embd_;  // world of one, tied: the same rows
  } else {
    ASSIGN_OR_RETURN(lm_head_,
                     loader.Matrix({rows_of(head_name, plan_.vocab)}, vocab_slice_max(), d));
  }

  const int64_t q_n = q_rows.size();
  const int64_t kv_n = kv_rows.size();
  // The canonical path: decided from the model and the backend alone, never the world, so that
  // every world holds the same row-parallel values and sums them the same way.
  // Granules: a head's columns of wo, the canonical FFN granule of w_down (the shard plan splits
  // on both in every world).
  const int64_t ffn_granule = model::CanonicalFfnGranule(config_);
  wo_granule_ = config_.head_dim / 32;
  down_granule_ = ffn_granule / 32;
  const bool ffn_whole = ffn_granule % 32 == 0 && plan_.ffn.begin % ffn_granule == 0 &&
                         plan_.ffn.end % ffn_granule == 0;
  exact_sums_ = options_.tp_invariant && !options_.dequantize &&
                backend_->SumsExactly(DType::kQ8_0) && config_.head_dim % 32 == 0 && ffn_whole;
  if (options_.tp_invariant && !exact_sums_) {
    LOG(INFO) << "weights: row-parallel projections summed in float (no canonical path: "
              << (options_.dequantize                    ? "exact mode"
                  : !backend_->SumsExactly(DType::kQ8_0) ? "the backend has no exact sums"
                  : config_.head_dim % 32 != 0           ? "head_dim is not whole blocks of 32"
                                                         : "the FFN split is not on its granules")
              << "): the logits depend on the world size";
  }
  auto row_parallel = [&](const WeightPart& part, int64_t cols) {
    return exact_sums_ ? loader.ExactSumsMatrix(part, d, cols) : loader.Matrix({part}, d, cols);
  };
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    Layer layer;
    ASSIGN_OR_RETURN(layer.attn_norm, loader.Vector(LayerName(l, "attn_norm"), d));
    ASSIGN_OR_RETURN(layer.ffn_norm, loader.Vector(LayerName(l, "ffn_norm"), d));
    ASSIGN_OR_RETURN(layer.wqkv, loader.Matrix({rows_of(LayerName(l, "attn_q"), q_rows),
                                                rows_of(LayerName(l, "attn_k"), kv_rows),
                                                rows_of(LayerName(l, "attn_v"), kv_rows)},
                                               q_n + 2 * kv_n, d));
    ASSIGN_OR_RETURN(layer.wo, row_parallel(columns_of(LayerName(l, "attn_output"), q_rows), q_n));
    ASSIGN_OR_RETURN(layer.w_gate_up, loader.Matrix({rows_of(LayerName(l, "ffn_gate"), ffn),
                                                     rows_of(LayerName(l, "ffn_up"), ffn)},
                                                    2 * ffn.size(), d));
    ASSIGN_OR_RETURN(layer.w_down,
                     row_parallel(columns_of(LayerName(l, "ffn_down"), ffn), ffn.size()));
    layers_.push_back(layer);
  }
  LOG(INFO) << "weights: rank " << plan_.rank << " holds " << loader.Summary() << " matrices";
  return absl::OkStatus();
}

absl::Status LlamaModel::MakeRandomWeights(uint64_t seed) {
  const int64_t d = config_.d_model;
  const int64_t hd = config_.head_dim;
  const DType wt = backend_->weight_dtype();
  uint64_t next_seed = seed;
  // A [rows, cols] matrix with entries of standard deviation 1 / sqrt(cols) (uniform in
  // ±sqrt(3 / cols)), so activations keep their scale through the layers.
  auto matrix = [&](int64_t rows, int64_t cols) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(rows, cols, wt));
    RETURN_IF_ERROR(
        backend_->FillRandom(t, next_seed++, std::sqrt(3.0f / static_cast<float>(cols))));
    return t;
  };
  const std::vector<float> ones(d, 1.0f);
  auto norm = [&]() -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, backend_->Allocate(1, d, DType::kF32));
    RETURN_IF_ERROR(backend_->Upload(ones.data(), DType::kF32, t));
    return t;
  };
  ASSIGN_OR_RETURN(token_embd_, backend_->Allocate(config_.vocab_size, d, wt));
  RETURN_IF_ERROR(backend_->FillRandom(token_embd_, next_seed++, 1.0f));
  ASSIGN_OR_RETURN(output_norm_, norm());
  ASSIGN_OR_RETURN(lm_head_, matrix(vocab_slice_max(), d));
  const int64_t q_n = plan_.q_heads_count() * hd;
  const int64_t kv_n = plan_.kv_heads_count() * hd;
  const int64_t f = plan_.ffn.size();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    Layer layer;
    ASSIGN_OR_RETURN(layer.attn_norm, norm());
    ASSIGN_OR_RETURN(layer.ffn_norm, norm());
    ASSIGN_OR_RETURN(layer.wqkv, matrix(q_n + 2 * kv_n, d));
    ASSIGN_OR_RETURN(layer.wo, matrix(d, q_n));
    ASSIGN_OR_RETURN(layer.w_gate_up, matrix(2 * f, d));
    ASSIGN_OR_RETURN(layer.w_down, matrix(d, f));
    layers_.push_back(layer);
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::AllocateWorkspace() {
  const int64_t t = options_.max_batch_tokens;
  const int64_t r = options_.max_logit_rows;
  const int64_t d = config_.d_model;
  const int64_t hd = config_.head_dim;
  const int64_t q = plan_.q_heads_count();
  const int64_t kv = plan_.kv_heads_count();
  const int64_t f = plan_.ffn.size();
  const int64_t v = vocab_slice_max();
  const DType act = backend_->activation_dtype();
  const DType f32 = DType::kF32;
  ASSIGN_OR_RETURN(ws_.x, backend_->Allocate(t, d, f32));
  ASSIGN_OR_RETURN(ws_.h, backend_->Allocate(t, d, act));
  ASSIGN_OR_RETURN(ws_.qkv, backend_->Allocate(t, (q + 2 * kv) * hd, f32));
  ASSIGN_OR_RETURN(ws_.attn, backend_->Allocate(t, q * hd, act));
  ASSIGN_OR_RETURN(ws_.proj, backend_->Allocate(t, d, f32));
  if (exact_sums_) {
    ASSIGN_OR_RETURN(ws_.sums, backend_->Allocate(t, d, DType::kI64));
  }
  ASSIGN_OR_RETURN(ws_.gate_up, backend_->Allocate(t, 2 * f, f32));
  ASSIGN_OR_RETURN(ws_.act, backend_->Allocate(t, f, act));
  ASSIGN_OR_RETURN(ws_.sel, backend_->Allocate(r, d, f32));
  ASSIGN_OR_RETURN(ws_.sel_h, backend_->Allocate(r, d, act));
  ASSIGN_OR_RETURN(ws_.logits, backend_->Allocate(r, v, f32));
  if (plan_.world_size > 1) {
    ASSIGN_OR_RETURN(ws_.gathered, backend_->Allocate(plan_.world_size * r, v, f32));
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::Forward(const StepBatch& batch, std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateStep(batch, step_limits_));
  const int64_t m = batch.num_tokens();
  const int64_t rows = batch.num_logit_rows();
  const float eps = static_cast<float>(config_.norm_eps);
  const int64_t q = plan_.q_heads_count();
  const int64_t kv = plan_.kv_heads_count();
  RETURN_IF_ERROR(backend_->BeginStep(batch));

  const Tensor x = ws_.x.Rows(m), h = ws_.h.Rows(m), qkv = ws_.qkv.Rows(m);
  const Tensor attn = ws_.attn.Rows(m), proj = ws_.proj.Rows(m);
  const Tensor gate_up = ws_.gate_up.Rows(m), act = ws_.act.Rows(m);
  RETURN_IF_ERROR(backend_->Embed(token_embd_, x));
  RETURN_IF_ERROR(backend_->RmsNorm(x, layers_[0].attn_norm, eps, h));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    RETURN_IF_ERROR(backend_->Matmul(h, layer.wqkv, qkv));
    RETURN_IF_ERROR(backend_->Rope(qkv, q, kv));
    RETURN_IF_ERROR(backend_->Attention(static_cast<int64_t>(l), qkv, q, kv, attn));
    RETURN_IF_ERROR(RowParallel(attn, layer.wo, wo_granule_, proj));
    RETURN_IF_ERROR(backend_->AddRmsNorm(x, proj, layer.ffn_norm, eps, h));
    RETURN_IF_ERROR(backend_->Matmul(h, layer.w_gate_up, gate_up));
    RETURN_IF_ERROR(backend_->SwiGlu(gate_up, act));
    RETURN_IF_ERROR(RowParallel(act, layer.w_down, down_granule_, proj));
    if (l + 1 < layers_.size()) {
      RETURN_IF_ERROR(backend_->AddRmsNorm(x, proj, layers_[l + 1].attn_norm, eps, h));
    } else {
      RETURN_IF_ERROR(backend_->Add(x, proj));
    }
  }
  logits->clear();
  if (rows == 0) return comm_->Synchronize();
  const Tensor sel = ws_.sel.Rows(rows), sel_h = ws_.sel_h.Rows(rows);
  RETURN_IF_ERROR(backend_->GatherLogitRows(x, sel));
  RETURN_IF_ERROR(backend_->RmsNorm(sel, output_norm_, eps, sel_h));
  RETURN_IF_ERROR(backend_->Matmul(sel_h, lm_head_, ws_.logits.Rows(rows)));
  return GatherLogits(rows, logits);
}

absl::Status LlamaModel::RowParallel(const Tensor& x, const Tensor& w, int64_t granule,
                                     Tensor out) {
  if (!exact_sums_) {
    RETURN_IF_ERROR(backend_->Matmul(x, w, out));
    return comm_->AllReduceSum(static_cast<float*>(out.data), out.elements());
  }
  const Tensor sums = ws_.sums.Rows(out.rows);
  RETURN_IF_ERROR(backend_->MatmulExact(x, w, granule, sums));
  RETURN_IF_ERROR(comm_->AllReduceSumInt64(static_cast<int64_t*>(sums.data), sums.elements()));
  return backend_->FixedToFloat(sums, out);
}

absl::Status LlamaModel::GatherLogits(int64_t rows, std::vector<float>* logits) {
  const int64_t vocab = config_.vocab_size;
  const int world = plan_.world_size;
  if (world == 1) {
    logits->resize(rows * vocab);
    return backend_->Download(ws_.logits.Rows(rows), logits->data());
  }

  // Each rank's slice is padded to V columns (its lm_head rows past its slice are zero), so
  // the gather moves equal blocks: gathered [P * rows, V], rank-major, on rank 0 only.
  const int64_t slice_max = vocab_slice_max();
  const Tensor gathered = ws_.gathered.Rows(world * rows);
  RETURN_IF_ERROR(comm_->Gather(static_cast<const float*>(ws_.logits.data), rows * slice_max,
                                static_cast<float*>(gathered.data)));
  RETURN_IF_ERROR(comm_->Synchronize());
  if (plan_.rank != 0) return absl::OkStatus();  // rank 0 samples; the others only send
  logits->resize(rows * vocab);
  host_gathered_.resize(world * rows * slice_max);
  RETURN_IF_ERROR(backend_->Download(gathered, host_gathered_.data()));
  for (int rank = 0; rank < world; ++rank) {
    ASSIGN_OR_RETURN(model::ShardPlan other, model::MakeShardPlan(config_, rank, world));
    const float* src = &host_gathered_[rank * rows * slice_max];
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(src + r * slice_max, other.vocab.size(),
                  logits->data() + r * vocab + other.vocab.begin);
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve::engine
