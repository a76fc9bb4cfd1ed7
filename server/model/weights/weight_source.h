// WeightSource: read-only access to a model's weights by canonical GGUF-style name, whatever
// the file format (GGUF file or Hugging Face safetensors directory), each tensor seen as a
// 2-D row-major [rows, cols] matrix: of f32 (dequantised or converted on read, ReadSlice), or
// in the blocks it is stored in (ReadBlocks), so that a backend can hold the file's format.
//
// Canonical names: token_embd.weight, output_norm.weight, output.weight (absent when the
// embeddings are tied), blk.N.{attn_norm, ffn_norm}.weight, blk.N.{attn_q, attn_k, attn_v,
// attn_output, ffn_gate, ffn_up, ffn_down}.weight and, with attention_bias,
// blk.N.{attn_q, attn_k, attn_v}.bias. A 1-D tensor of n values is [1, n].
// Matrices are [out_features, in_features]: attn_q is [n_heads * head_dim, d_model].
//
// One convention for Q/K rows: the order of llama.cpp's GGUF files. For Llama/Mistral
// (config().rope_style == kInterleaved) each head's rows are permuted so RoPE rotates rows
// (2i, 2i+1); Hugging Face checkpoints store them rotate-half ordered (i, i + head_dim/2),
// and the safetensors source maps rows on read. Qwen2 (kNeox) is never permuted.
//
// Implementations are immutable after opening; every method is thread-safe.
#ifndef TPSERVE_SERVER_MODEL_WEIGHTS_WEIGHT_SOURCE_H_
#define TPSERVE_SERVER_MODEL_WEIGHTS_WEIGHT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/model/gguf/ggml_type.h"
#include "server/model/weights/model_config.h"

namespace tpserve::model {

struct WeightShape {
  int64_t rows = 0;
  int64_t cols = 0;
  bool operator==(const WeightShape&) const = default;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // "gguf" or "safetensors".
  virtual std::string_view format() const = 0;
  // The validated model configuration.
  virtual const ModelConfig& config() const = 0;
  // Every canonical name this source holds, sorted.
  virtual std::vector<std::string> Names() const = 0;
  virtual bool Has(std::string_view name) const = 0;
  // [rows, cols] of `name`; NotFound when absent.
  virtual absl::StatusOr<WeightShape> Shape(std::string_view name) const = 0;

  // out: [row_end - row_begin, col_end - col_begin] row-major f32, the sub-matrix
  // rows [row_begin, row_end) x cols [col_begin, col_end) of `name`. NotFound when absent,
  // OutOfRange for a bad range; for quantised GGUF tensors the column range must respect
  // what the dequantiser allows (any range: it decodes whole blocks and copies the slice).
  virtual absl::Status ReadSlice(std::string_view name, int64_t row_begin, int64_t row_end,
                                 int64_t col_begin, int64_t col_end, float* out) const = 0;

  // The element type `name` is stored in, which ReadBlocks returns: the file's type for GGUF;
  // F32 for sources that convert on read (safetensors). NotFound when absent.
  virtual absl::StatusOr<GgmlTypeInfo> StoredType(std::string_view name) const;

  // out: rows [row_begin, row_end) x cols [col_begin, col_end) of `name` in StoredType's
  // blocks, row-major: row_end - row_begin rows of (col_end - col_begin) / block_values blocks.
  // InvalidArgument when a column bound is not a multiple of the block size, or when a block
  // holds a non-finite scale or value (the message names the tensor); NotFound, OutOfRange as
  // ReadSlice.
  virtual absl::Status ReadBlocks(std::string_view name, int64_t row_begin, int64_t row_end,
                                  int64_t col_begin, int64_t col_end, uint8_t* out) const;

  // Drops the source's file pages from resident memory once its weights are loaded (they
  // are read again, from the page cache, by a later load). Default: nothing to drop.
  virtual void ReleaseResidentPages() const {}

  // out: [row_end - row_begin, cols] row-major f32.
  absl::Status ReadRows(std::string_view name, int64_t row_begin, int64_t row_end,
                        float* out) const;

 protected:
  // OK when 0 <= row_begin <= row_end <= shape.rows and likewise for columns; else
  // OutOfRange naming `name` and the range.
  static absl::Status CheckRange(std::string_view name, const WeightShape& shape, int64_t row_begin,
                                 int64_t row_end, int64_t col_begin, int64_t col_end);
};

// A GGUF file (dequantising through server/model/gguf/dequantize.h).
absl::StatusOr<std::unique_ptr<WeightSource>> OpenGgufWeightSource(const std::string& path);
// A Hugging Face directory with config.json and safetensors weights.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenSafetensorsWeightSource(const std::string& dir);
// Picks by path: a file ending in .gguf, or a directory holding config.json.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path);

}  // namespace tpserve::model

#endif  // TPSERVE_SERVER_MODEL_WEIGHTS_WEIGHT_SOURCE_H_
