// SafetensorsWeightSource: a Hugging Face checkpoint seen through canonical GGUF names, with
// Llama Q/K rows permuted into llama.cpp's GGUF order on read.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/status_macros.h"
#include "server/model/weights/safetensors_checkpoint.h"
#include "server/model/weights/weight_source.h"

namespace tpserve::model {
namespace {

// One canonical tensor: where its values are and how its rows (or, for a [1, n] bias,
// columns) are reordered.
struct Mapped {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = nullptr;
  WeightShape shape;
  int64_t permute_heads = 0;  // > 0: GGUF row r reads HF row HfRow(r) over this many heads
};

// llama.cpp's permute(w, n_head): reshape(n_head, 2, hd/2, cols).swapaxes(1, 2). GGUF row
// r = h*hd + 2i + j holds HF row h*hd + j*hd/2 + i.
int64_t HfRow(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim;
  const int64_t w = r % head_dim;
  return h * head_dim + (w % 2) * (head_dim / 2) + w / 2;
}

// The canonical name of a Hugging Face tensor name, or "" when it is not a model weight.
std::string CanonicalName(std::string_view hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  absl::string_view rest(hf.data(), hf.size());
  if (!absl::ConsumePrefix(&rest, "model.layers.")) return "";
  const size_t dot = rest.find('.');
  int64_t layer;
  if (dot == std::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &layer)) return "";
  rest.remove_prefix(dot + 1);
  static const std::pair<std::string_view, std::string_view> kParts[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  for (const auto& [from, to] : kParts) {
    if (rest == absl::string_view(from.data(), from.size())) {
      return absl::StrCat("blk.", layer, ".", std::string(to));
    }
  }
  return "";
}

class SafetensorsWeightSource : public WeightSource {
 public:
  static absl::StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& dir) {
    auto src = std::unique_ptr<SafetensorsWeightSource>(new SafetensorsWeightSource());
    ASSIGN_OR_RETURN(src->ckpt_, SafetensorsCheckpoint::Open(dir));
    ASSIGN_OR_RETURN(src->config_, ModelConfigFromHfJson(src->ckpt_->config_json()));
    ModelConfig& c = src->config_;
    const bool has_lm_head = src->ckpt_->Find("lm_head.weight") != nullptr;
    c.tied_embeddings = c.tied_embeddings || !has_lm_head;
    for (const std::string& hf : src->ckpt_->Names()) {
      const std::string canonical = CanonicalName(hf);
      if (canonical.empty()) continue;  // rotary_emb.inv_freq and the like
      if (canonical == "output.weight" && c.tied_embeddings) continue;
      const SafetensorsCheckpoint::Entry* e = src->ckpt_->Find(hf);
      Mapped m{e->file, e->info, {}, 0};
      const std::vector<int64_t>& s = e->info->shape;
      if (s.size() == 1) {
        m.shape = {1, s[0]};
      } else if (s.size() == 2) {
        m.shape = {s[0], s[1]};
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", hf, " has ", s.size(), " dimensions; weights are 1-D or 2-D"));
      }
      if (c.rope_style == RopeStyle::kInterleaved) {
        const bool q = absl::StrContains(canonical, ".attn_q.");
        const bool k = absl::StrContains(canonical, ".attn_k.");
        if (q || k) {
          m.permute_heads = q ? c.n_heads : c.n_kv_heads;
          const int64_t n = s.size() == 1 ? m.shape.cols : m.shape.rows;
          if (n != m.permute_heads * c.head_dim) {
            return absl::InvalidArgumentError(absl::StrCat("tensor ", hf, " has ", n,
                                                           " outputs, expected ", m.permute_heads,
                                                           " heads x head_dim ", c.head_dim));
          }
        }
      }
      src->tensors_[canonical] = m;
    }
    for (const char* required : {"token_embd.weight", "output_norm.weight"}) {
      if (!src->Has(required)) {
        return absl::NotFoundError(absl::StrCat(dir, " has no tensor for ", required));
      }
    }
    return std::unique_ptr<WeightSource>(std::move(src));
  }

  std::string_view format() const override { return "safetensors"; }
  const ModelConfig& config() const override { return config_; }

  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    names.reserve(tensors_.size());
    for (const auto& [name, m] : tensors_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool Has(std::string_view name) const override { return tensors_.find(name) != tensors_.end(); }

  absl::StatusOr<WeightShape> Shape(std::string_view name) const override {
    ASSIGN_OR_RETURN(const Mapped* m, Lookup(name));
    return m->shape;
  }

  absl::Status ReadSlice(std::string_view name, int64_t row_begin, int64_t row_end,
                         int64_t col_begin, int64_t col_end, float* out) const override {
    ASSIGN_OR_RETURN(const Mapped* m, Lookup(name));
    RETURN_IF_ERROR(CheckRange(name, m->shape, row_begin, row_end, col_begin, col_end));
    const int64_t width = col_end - col_begin;
    const int64_t hd = config_.head_dim;
    if (m->permute_heads > 0 && m->shape.rows == 1) {
      // A [1, n] bias: the permutation runs along the columns.
      for (int64_t c = col_begin; c < col_end; ++c) {
        RETURN_IF_ERROR(m->file->ReadValues(*m->info, HfRow(c, hd), 1, out + (c - col_begin)));
      }
      return absl::OkStatus();
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t src_row = m->permute_heads > 0 ? HfRow(r, hd) : r;
      const uint64_t first = static_cast<uint64_t>(src_row * m->shape.cols + col_begin);
      // out row (r - row_begin): [width]
      RETURN_IF_ERROR(m->file->ReadValues(*m->info, first, static_cast<uint64_t>(width),
                                          out + (r - row_begin) * width));
    }
    return absl::OkStatus();
  }

 private:
  SafetensorsWeightSource() = default;

  absl::StatusOr<const Mapped*> Lookup(std::string_view name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      return absl::NotFoundError(
          absl::StrCat("weight ", std::string(name), " is not in ", ckpt_->dir()));
    }
    return &it->second;
  }

  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  ModelConfig config_;
  std::map<std::string, Mapped, std::less<>> tensors_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> OpenSafetensorsWeightSource(const std::string& dir) {
  return SafetensorsWeightSource::Open(dir);
}

}  // namespace tpserve::model
