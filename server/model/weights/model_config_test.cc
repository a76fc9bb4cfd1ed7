#include "server/model/weights/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model/weights/model_config_test_util.h"

namespace tpserve::model {
namespace {

using ::testing::ElementsAre;
using testing::GgufBuilder;
using ::testing::HasSubstr;

GgufBuilder SmolLikeGguf(uint32_t n_kv_heads = 2) {
  GgufBuilder b;
  b.Str("general.architecture", "llama")
      .Str("general.name", "tiny")
      .U32("llama.block_count", 2)
      .U32("llama.context_length", 256)
      .U32("llama.embedding_length", 64)
      .U32("llama.feed_forward_length", 96)
      .U32("llama.attention.head_count", 4)
      .U32("llama.attention.head_count_kv", n_kv_heads)
      .F32("llama.rope.freq_base", 100000.0f)
      .F32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .U32("llama.rope.dimension_count", 16)
      .StrArray("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"})
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 2)
      .Tensor("token_embd.weight", {64, 5}, std::vector<float>(320, 0.f));
  return b;
}

TEST(ModelConfigGgufTest, ReadsLlamaKeys) {
  auto file = GgufFile::FromBytes(SmolLikeGguf().Build());
  ASSERT_TRUE(file.ok()) << file.status();
  auto c = ModelConfigFromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->name, "tiny");
  EXPECT_EQ(c->n_layers, 2);
  EXPECT_EQ(c->d_model, 64);
  EXPECT_EQ(c->ffn_dim, 96);
  EXPECT_EQ(c->n_heads, 4);
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->context_length, 256);
  EXPECT_EQ(c->vocab_size, 5);  // from the tokens array
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000.0);
  EXPECT_NEAR(c->norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c->tied_embeddings);  // no output.weight
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
}

TEST(ModelConfigGgufTest, UntiedVocabKeyLinearScalingQwen2) {
  GgufBuilder b;
  b.Str("general.architecture", "qwen2")
      .U32("qwen2.block_count", 1)
      .U32("qwen2.context_length", 64)
      .U32("qwen2.embedding_length", 32)
      .U32("qwen2.feed_forward_length", 48)
      .U32("qwen2.attention.head_count", 2)
      .U32("qwen2.vocab_size", 7)
      .Str("qwen2.rope.scaling.type", "linear")
      .F32("qwen2.rope.scaling.factor", 4.0f)
      .Tensor("output.weight", {32, 7}, std::vector<float>(224, 0.f));
  auto file = GgufFile::FromBytes(b.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  auto c = ModelConfigFromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 7);
  EXPECT_EQ(c->n_kv_heads, 2);  // defaults to head_count
  EXPECT_EQ(c->head_dim, 16);   // d_model / n_heads
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_EQ(c->rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
}

TEST(ModelConfigGgufTest, ErrorsNameTheProblem) {
  GgufBuilder gpt;
  gpt.Str("general.architecture", "gpt2");
  auto f1 = GgufFile::FromBytes(gpt.Build());
  ASSERT_TRUE(f1.ok());
  EXPECT_THAT(ModelConfigFromGguf(**f1).status().message(), HasSubstr("gpt2"));

  GgufBuilder missing;
  missing.Str("general.architecture", "llama").U32("llama.embedding_length", 64);
  auto f2 = GgufFile::FromBytes(missing.Build());
  ASSERT_TRUE(f2.ok());
  EXPECT_THAT(ModelConfigFromGguf(**f2).status().message(), HasSubstr("llama.block_count"));

  auto f3 = GgufFile::FromBytes(SmolLikeGguf(/*n_kv_heads=*/3).Build());
  ASSERT_TRUE(f3.ok());
  EXPECT_THAT(ModelConfigFromGguf(**f3).status().message(), HasSubstr("n_kv_heads = 3"));
}

constexpr char kLlama3Json[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": "x/y",
  "vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
  "num_key_value_heads": 2, "intermediate_size": 512, "max_position_embeddings": 131072,
  "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
  "bos_token_id": 1, "eos_token_id": [2, 3, 4],
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

TEST(ModelConfigHfTest, Llama3WithRopeScalingAndEosList) {
  auto c = ModelConfigFromHfJson(kLlama3Json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->name, "x/y");
  EXPECT_EQ(c->vocab_size, 1000);
  EXPECT_EQ(c->d_model, 256);
  EXPECT_EQ(c->n_layers, 3);
  EXPECT_EQ(c->n_heads, 8);
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->ffn_dim, 512);
  EXPECT_EQ(c->context_length, 131072);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 3, 4));
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c->ToJson()["rope_scaling"]["type"], "llama3");
}

TEST(ModelConfigHfTest, MistralAndQwen2) {
  auto m = ModelConfigFromHfJson(R"({"architectures":["MistralForCausalLM"],"vocab_size":32,
    "hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":1,
    "intermediate_size":128,"max_position_embeddings":512,"head_dim":32,"eos_token_id":2,
    "rope_scaling":{"type":"linear","factor":2.0}})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_EQ(m->head_dim, 32);  // explicit, differs from hidden/heads
  EXPECT_FALSE(m->tied_embeddings);
  EXPECT_NEAR(m->norm_eps, 1e-6, 1e-15);
  EXPECT_EQ(m->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_THAT(m->eos_token_ids, ElementsAre(2));

  auto q = ModelConfigFromHfJson(R"({"architectures":["Qwen2ForCausalLM"],"vocab_size":32,
    "hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
    "intermediate_size":128,"max_position_embeddings":512.0,"tie_word_embeddings":true})");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->architecture, "qwen2");
  EXPECT_EQ(q->rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(q->attention_bias);
  EXPECT_EQ(q->context_length, 512);
}

TEST(ModelConfigHfTest, ErrorsNameTheProblem) {
  EXPECT_THAT(ModelConfigFromHfJson("{oops").status().message(), HasSubstr("not a valid JSON"));
  EXPECT_THAT(ModelConfigFromHfJson(R"({"architectures":["GPT2LMHeadModel"]})").status().message(),
              HasSubstr("GPT2LMHeadModel"));
  EXPECT_THAT(ModelConfigFromHfJson(R"({"architectures":["LlamaForCausalLM"]})").status().message(),
              HasSubstr("vocab_size"));
  std::string yarn = kLlama3Json;
  yarn.replace(yarn.find("\"llama3\""), 8, "\"yarn\"");
  EXPECT_EQ(ModelConfigFromHfJson(yarn).status().code(), absl::StatusCode::kUnimplemented);
  std::string bad_eos = kLlama3Json;
  bad_eos.replace(bad_eos.find("[2, 3, 4]"), 9, "[2, 3, 4000]");
  EXPECT_THAT(ModelConfigFromHfJson(bad_eos).status().message(), HasSubstr("eos_token_ids"));
}

ModelConfig Valid() {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 100;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 128;
  c.context_length = 128;
  return c;
}

TEST(ModelConfigValidateTest, EachFailureNamesItsField) {
  EXPECT_TRUE(Valid().Validate().ok());
  struct Case {
    void (*mutate)(ModelConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.architecture.clear(); }, "architecture"},
      {[](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {[](ModelConfig& c) { c.d_model = -1; }, "d_model"},
      {[](ModelConfig& c) { c.n_layers = 0; }, "n_layers"},
      {[](ModelConfig& c) { c.n_kv_heads = 3; }, "n_heads"},
      {[](ModelConfig& c) { c.n_kv_heads = 0; }, "n_kv_heads"},
      {[](ModelConfig& c) { c.head_dim = 15; }, "head_dim"},
      {[](ModelConfig& c) { c.ffn_dim = 0; }, "ffn_dim"},
      {[](ModelConfig& c) { c.context_length = 0; }, "context_length"},
      {[](ModelConfig& c) { c.rope_theta = 0; }, "rope_theta"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "norm_eps"},
      {[](ModelConfig& c) {
         c.rope_scaling.type = RopeScalingType::kLinear;
         c.rope_scaling.factor = 0;
       },
       "rope_scaling.factor"},
      {[](ModelConfig& c) {
         c.rope_scaling.type = RopeScalingType::kLlama3;
         c.rope_scaling.factor = 8;
         c.rope_scaling.original_max_position = 0;
       },
       "rope_scaling.original_max_position"},
      {[](ModelConfig& c) {
         c.rope_scaling.type = RopeScalingType::kLlama3;
         c.rope_scaling.high_freq_factor = 0.5;
       },
       "rope_scaling.high_freq_factor"},
      {[](ModelConfig& c) { c.bos_token_id = 100; }, "bos_token_id"},
      {[](ModelConfig& c) { c.eos_token_ids = {-1}; }, "eos_token_ids"},
  };
  for (const Case& k : cases) {
    ModelConfig c = Valid();
    k.mutate(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(s.message(), HasSubstr(std::string("model config: ") + k.field)) << s;
  }
}

}  // namespace
}  // namespace tpserve::model
