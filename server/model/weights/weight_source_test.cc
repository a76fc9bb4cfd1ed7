#include "server/model/weights/weight_source.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/weights/model_config_test_util.h"

namespace tpserve::model {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;
using ::testing::HasSubstr;
using testing::StTensor;

// One layer, d_model 8, 2 query heads and 1 KV head of head_dim 4, ffn 6, vocab 5.
constexpr int64_t kD = 8, kHeads = 2, kKv = 1, kHd = 4, kFfn = 6, kVocab = 5;

std::vector<float> Values(int64_t n, float seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = seed + 0.25f * static_cast<float>(i);
  return v;
}

// llama.cpp's permute: GGUF row h*hd + 2i + j = HF row h*hd + j*hd/2 + i, written out
// independently of the code under test.
std::vector<float> Permute(const std::vector<float>& hf, int64_t n_head, int64_t cols) {
  std::vector<float> out(hf.size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < kHd / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        for (int64_t c = 0; c < cols; ++c) {
          out[(h * kHd + 2 * i + j) * cols + c] = hf[(h * kHd + j * kHd / 2 + i) * cols + c];
        }
      }
    }
  }
  return out;
}

struct Tensor {
  std::string hf;
  int64_t rows, cols;
};

const std::map<std::string, Tensor>& Layout() {
  static const auto* layout = new std::map<std::string, Tensor>{
      {"token_embd.weight", {"model.embed_tokens.weight", kVocab, kD}},
      {"output_norm.weight", {"model.norm.weight", 1, kD}},
      {"output.weight", {"lm_head.weight", kVocab, kD}},
      {"blk.0.attn_norm.weight", {"model.layers.0.input_layernorm.weight", 1, kD}},
      {"blk.0.ffn_norm.weight", {"model.layers.0.post_attention_layernorm.weight", 1, kD}},
      {"blk.0.attn_q.weight", {"model.layers.0.self_attn.q_proj.weight", kHeads * kHd, kD}},
      {"blk.0.attn_k.weight", {"model.layers.0.self_attn.k_proj.weight", kKv * kHd, kD}},
      {"blk.0.attn_v.weight", {"model.layers.0.self_attn.v_proj.weight", kKv * kHd, kD}},
      {"blk.0.attn_output.weight", {"model.layers.0.self_attn.o_proj.weight", kD, kHeads * kHd}},
      {"blk.0.ffn_gate.weight", {"model.layers.0.mlp.gate_proj.weight", kFfn, kD}},
      {"blk.0.ffn_up.weight", {"model.layers.0.mlp.up_proj.weight", kFfn, kD}},
      {"blk.0.ffn_down.weight", {"model.layers.0.mlp.down_proj.weight", kD, kFfn}},
  };
  return *layout;
}

class WeightSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("weight_source_test_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "hf");
    GgufBuilder g;
    g.Str("general.architecture", "llama")
        .U32("llama.block_count", 1)
        .U32("llama.context_length", 32)
        .U32("llama.embedding_length", kD)
        .U32("llama.feed_forward_length", kFfn)
        .U32("llama.attention.head_count", kHeads)
        .U32("llama.attention.head_count_kv", kKv)
        .U32("llama.vocab_size", kVocab);
    std::vector<StTensor> st;
    float seed = 1.0f;
    for (const auto& [name, t] : Layout()) {
      std::vector<float> hf = Values(t.rows * t.cols, seed);
      seed += 100.0f;
      std::vector<float> gg = hf;
      if (name == "blk.0.attn_q.weight") gg = Permute(hf, kHeads, t.cols);
      if (name == "blk.0.attn_k.weight") gg = Permute(hf, kKv, t.cols);
      if (t.rows == 1) {
        g.Tensor(name, {static_cast<uint64_t>(t.cols)}, gg);
        st.push_back({t.hf, {t.cols}, hf});
      } else {
        g.Tensor(name, {static_cast<uint64_t>(t.cols), static_cast<uint64_t>(t.rows)}, gg);
        st.push_back({t.hf, {t.rows, t.cols}, hf});
      }
    }
    std::ofstream(dir_ / "m.gguf", std::ios::binary) << g.Build();
    std::ofstream(dir_ / "hf" / "model.safetensors", std::ios::binary)
        << testing::MakeSafetensors(st);
    std::ofstream(dir_ / "hf" / "config.json")
        << R"({"architectures":["LlamaForCausalLM"],"vocab_size":5,"hidden_size":8,)"
           R"("num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,)"
           R"("intermediate_size":6,"max_position_embeddings":32,"rms_norm_eps":1e-5})";
  }
  fs::path dir_;
};

TEST_F(WeightSourceTest, BothFormatsGiveTheSameTensorsInGgufOrder) {
  auto gguf = OpenWeightSource((dir_ / "m.gguf").string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto st = OpenWeightSource((dir_ / "hf").string());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*gguf)->format(), "gguf");
  EXPECT_EQ((*st)->format(), "safetensors");
  EXPECT_EQ((*gguf)->Names(), (*st)->Names());
  EXPECT_EQ((*gguf)->config().ToJson(), (*st)->config().ToJson());
  for (const auto& [name, t] : Layout()) {
    SCOPED_TRACE(name);
    auto shape = (*st)->Shape(name);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(*shape, (WeightShape{t.rows, t.cols}));
    EXPECT_EQ(*(*gguf)->Shape(name), *shape);
    std::vector<float> a(t.rows * t.cols), b(t.rows * t.cols);
    ASSERT_TRUE((*gguf)->ReadRows(name, 0, t.rows, a.data()).ok());
    ASSERT_TRUE((*st)->ReadRows(name, 0, t.rows, b.data()).ok());
    EXPECT_EQ(a, b);
    // An interior slice: rows [r0, rows), cols [1, cols - 1).
    const int64_t r0 = t.rows > 1 ? 1 : 0, w = t.cols - 2;
    std::vector<float> sa((t.rows - r0) * w), sb((t.rows - r0) * w);
    ASSERT_TRUE((*gguf)->ReadSlice(name, r0, t.rows, 1, t.cols - 1, sa.data()).ok());
    ASSERT_TRUE((*st)->ReadSlice(name, r0, t.rows, 1, t.cols - 1, sb.data()).ok());
    EXPECT_EQ(sa, sb);
    EXPECT_EQ(sa[0], a[r0 * t.cols + 1]);
  }
  // The permutation itself: GGUF q row 1 (head 0, i 0, j 1) is HF row 2 (= hd/2).
  float row[kD];
  ASSERT_TRUE((*st)->ReadRows("blk.0.attn_q.weight", 1, 2, row).ok());
  const auto q_index = std::distance(Layout().begin(), Layout().find("blk.0.attn_q.weight"));
  const float q_seed = 1.0f + 100.0f * static_cast<float>(q_index);
  EXPECT_EQ(row[0], q_seed + 0.25f * (2 * kD));
}

TEST_F(WeightSourceTest, ErrorsAndTiedEmbeddings) {
  auto st = OpenWeightSource((dir_ / "hf").string());
  ASSERT_TRUE(st.ok()) << st.status();
  float x[64];
  EXPECT_EQ((*st)->ReadRows("blk.9.attn_q.weight", 0, 1, x).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*st)->ReadRows("output.weight", 4, 6, x).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*st)->ReadSlice("output.weight", 0, 1, 3, 2, x).code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE((*st)->config().tied_embeddings);

  std::string cfg = R"({"architectures":["LlamaForCausalLM"],"vocab_size":5,"hidden_size":8,)"
                    R"("num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,)"
                    R"("intermediate_size":6,"max_position_embeddings":32,)"
                    R"("tie_word_embeddings":true})";
  std::ofstream(dir_ / "hf" / "config.json") << cfg;
  auto tied = OpenWeightSource((dir_ / "hf").string());
  ASSERT_TRUE(tied.ok()) << tied.status();
  EXPECT_TRUE((*tied)->config().tied_embeddings);
  EXPECT_FALSE((*tied)->Has("output.weight"));

  EXPECT_THAT(OpenWeightSource((dir_ / "nothing.bin").string()).status().message(),
              HasSubstr("does not exist"));
  EXPECT_EQ(OpenWeightSource(dir_.string()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tpserve::model
