#include "server/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace tpserve::engine {
namespace {

const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f};

// Chi-square critical values at p = 0.001 for 1..7 degrees of freedom.
constexpr double kChi2Critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};

// The distribution the sampler should draw from, computed independently: softmax(l / t),
// then keep the top k, then the smallest prefix reaching top_p, then drop below min_p * max.
std::vector<double> ExpectedDistribution(const std::vector<float>& logits, double t, int top_k,
                                         double top_p, double min_p) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> p(n, 0.0);
  const int k = top_k > 0 ? std::min(top_k, n) : n;
  double z = 0.0;
  for (int i = 0; i < k; ++i) z += std::exp(logits[order[i]] / t);
  int keep = k;
  double cumulative = 0.0;
  for (int i = 0; i < k; ++i) {
    cumulative += std::exp(logits[order[i]] / t) / z;
    if (cumulative >= top_p - 1e-12) {
      keep = i + 1;
      break;
    }
  }
  const double pmax = std::exp(logits[order[0]] / t) / z;
  double kept = 0.0;
  for (int i = 0; i < keep; ++i) {
    const double pi = std::exp(logits[order[i]] / t) / z;
    if (i > 0 && pi < min_p * pmax) break;
    p[order[i]] = pi;
    kept += pi;
  }
  for (double& v : p) v /= kept;
  return p;
}

// Draws `n` tokens (counters 0..n-1) and checks the counts against `expected` with a
// chi-square test; tokens of probability 0 must never be drawn.
void ExpectDistribution(const SamplingParams& params, const std::vector<double>& expected) {
  constexpr int kDraws = 20000;
  Sampler sampler;
  std::vector<int> counts(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    ++counts[sampler.Sample(kLogits, params, {}, i).token_id];
  }
  double chi2 = 0.0;
  int cells = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the truncated distribution";
      continue;
    }
    const double e = expected[i] * kDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  ASSERT_GE(cells, 1);
  if (cells > 1) {
    EXPECT_LT(chi2, kChi2Critical[cells - 1]) << "chi-square with " << cells - 1 << " dof";
  }
}

TEST(SamplerTest, GreedyTakesArgmaxAndLowestIdOnTies) {
  Sampler sampler;
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sampler.Sample(kLogits, p, {}, 0).token_id, 1);
  const std::vector<float> tie = {0.0f, 3.0f, 1.0f, 3.0f};
  EXPECT_EQ(sampler.Sample(tie, p, {}, 0).token_id, 1);
}

TEST(SamplerTest, TemperatureDistribution) {
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 11;
    ExpectDistribution(p, ExpectedDistribution(kLogits, t, 0, 1.0, 0.0));
  }
}

TEST(SamplerTest, TopKDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.seed = 5;
  ExpectDistribution(p, ExpectedDistribution(kLogits, 1.0, 3, 1.0, 0.0));
}

TEST(SamplerTest, TopPDistribution) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.7f;
  p.seed = 9;
  ExpectDistribution(p, ExpectedDistribution(kLogits, 0.8, 0, 0.7, 0.0));
}

TEST(SamplerTest, MinPDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.3f;
  p.seed = 3;
  ExpectDistribution(p, ExpectedDistribution(kLogits, 1.0, 0, 1.0, 0.3));
}

TEST(SamplerTest, CombinedTruncation) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 6;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  p.seed = 21;
  ExpectDistribution(p, ExpectedDistribution(kLogits, 1.3, 6, 0.9, 0.1));
}

// The locally typical distribution of softmax(logits / t), computed directly: the tokens by
// |-log p - H| ascending (H the entropy), the smallest prefix reaching `mass`, renormalised.
std::vector<double> ExpectedTypical(const std::vector<float>& logits, double t, double mass) {
  const int n = static_cast<int>(logits.size());
  std::vector<double> p(n);
  double z = 0.0;
  for (int i = 0; i < n; ++i) z += std::exp(logits[i] / t);
  double entropy = 0.0;
  for (int i = 0; i < n; ++i) {
    p[i] = std::exp(logits[i] / t) / z;
    entropy -= p[i] * std::log(p[i]);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::fabs(-std::log(p[a]) - entropy) < std::fabs(-std::log(p[b]) - entropy);
  });
  std::vector<double> out(n, 0.0);
  double kept = 0.0;
  for (int i : order) {
    out[i] = p[i];
    kept += p[i];
    if (kept >= mass) break;
  }
  for (double& v : out) v /= kept;
  return out;
}

TEST(SamplerTest, TypicalDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.typical_p = 0.4f;
  p.seed = 17;
  const std::vector<double> expected = ExpectedTypical(kLogits, 1.0, 0.4);
  // The most likely token (id 1) is less typical than the next ones, and is left out.
  EXPECT_EQ(expected[1], 0.0);
  ExpectDistribution(p, expected);
}

TEST(SamplerTest, PenaltiesMatchHandComputedLogits) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> generated = {3, 3, 1, 3};
  ApplyPenalties(absl::MakeSpan(logits), p, {prompt, generated});
  // token 0: in prompt, positive: 2 / 2 = 1; not generated.
  // token 1: in prompt and generated once, negative: -1 * 2 = -2, then - 0.5*1 - 0.25.
  // token 2: untouched. token 3: generated 3 times: 3 / 2 = 1.5, then - 1.5 - 0.25.
  // token 4: untouched.
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], -2.75f);
  EXPECT_FLOAT_EQ(logits[2], 0.5f);
  EXPECT_FLOAT_EQ(logits[3], -0.25f);
  EXPECT_FLOAT_EQ(logits[4], -2.0f);
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  Sampler sampler;
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> generated = {1};
  // Token 1 (2.5) drops to 1.5, below token 4 (2.0).
  EXPECT_EQ(sampler.Sample(kLogits, p, {{}, generated}, 0).token_id, 4);
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 1234;
  Sampler a, b;
  std::vector<int32_t> first, again, other;
  for (int i = 0; i < 64; ++i) {
    first.push_back(a.Sample(kLogits, p, {}, i).token_id);
    again.push_back(b.Sample(kLogits, p, {}, i).token_id);
  }
  p.seed = 1235;
  for (int i = 0; i < 64; ++i) other.push_back(a.Sample(kLogits, p, {}, i).token_id);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  // The draw for index i does not depend on the draws before it.
  p.seed = 1234;
  EXPECT_EQ(a.Sample(kLogits, p, {}, 40).token_id, first[40]);
}

TEST(SamplerTest, LogprobsOfChosenAndTop) {
  Sampler sampler;
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  const SampleResult r = sampler.Sample(kLogits, p, {}, 0);
  double z = 0.0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_NEAR(r.logprob, 2.5 - std::log(z), 1e-6);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token_id, 1);
  EXPECT_EQ(r.top[1].token_id, 4);
  EXPECT_EQ(r.top[2].token_id, 6);
  EXPECT_NEAR(r.top[2].logprob, 1.7 - std::log(z), 1e-6);
  EXPECT_GE(r.top[0].logprob, r.top[1].logprob);
}

TEST(SamplerTest, LogprobsUseTheTemperature) {
  Sampler sampler;
  SamplingParams p;
  p.temperature = 2.0f;
  p.top_k = 1;
  p.logprobs = 1;
  const SampleResult r = sampler.Sample(kLogits, p, {}, 0);
  EXPECT_EQ(r.token_id, 1);
  double z = 0.0;
  for (float l : kLogits) z += std::exp(l / 2.0);
  EXPECT_NEAR(r.logprob, 2.5 / 2.0 - std::log(z), 1e-6);
}

// A 64-token vocabulary with distinct, exactly representable logits in [-4, 3.875].
std::vector<float> PinnedLogits() {
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = static_cast<float>((i * 37) % 64) / 8.0f - 4.0f;
  return logits;
}

// The first eight draws (counters 0..7) of a few seeded configurations, token and logprob bit
// for bit, as the sampler made them when this test was written: whatever the sampler's code
// becomes, the same seed must keep giving the same tokens.
TEST(SamplerTest, SeededDrawsArePinned) {
  struct Case {
    const char* name;
    SamplingParams params;
    bool with_history;
    std::vector<TokenLogprob> draws;
  };
  auto params = [](float t, int32_t k, float top_p, float min_p, uint64_t seed) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
  };
  SamplingParams combined = params(1.1f, 20, 0.9f, 0.02f, 2024);
  combined.repetition_penalty = 1.3f;
  combined.frequency_penalty = 0.4f;
  combined.presence_penalty = 0.2f;
  combined.logprobs = 3;
  const std::vector<Case> cases = {
      {"temperature",
       params(0.7f, 0, 1.0f, 0.0f, 42),
       false,
       {{50, -0x1.5a0e9ap+1f},
        {27, -0x1.862bep+2f},
        {62, -0x1.b57c5p+1f},
        {24, -0x1.87c574p+1f},
        {57, -0x1.157c5p+1f},
        {57, -0x1.157c5p+1f},
        {38, -0x1.fd41c4p+0f},
        {57, -0x1.157c5p+1f}}},
      {"top_k",
       params(1.3f, 10, 1.0f, 0.0f, 7),
       false,
       {{62, -0x1.a05a42p+1f},
        {12, -0x1.5681a4p+1f},
        {19, -0x1.319556p+1f},
        {57, -0x1.4a32ep+1f},
        {57, -0x1.4a32ep+1f},
        {57, -0x1.4a32ep+1f},
        {24, -0x1.87bcb8p+1f},
        {38, -0x1.3de41ap+1f}}},
      {"top_p",
       params(1.0f, 0, 0.8f, 0.0f, 99),
       false,
       {{5, -0x1.720adp+1f},
        {24, -0x1.820adp+1f},
        {12, -0x1.420adp+1f},
        {24, -0x1.820adp+1f},
        {38, -0x1.220adp+1f},
        {24, -0x1.820adp+1f},
        {50, -0x1.620adp+1f},
        {38, -0x1.220adp+1f}}},
      {"min_p",
       params(0.9f, 0, 1.0f, 0.05f, 5),
       false,
       {{62, -0x1.a57364p+1f},
        {57, -0x1.29019cp+1f},
        {41, -0x1.22b9b2p+2f},
        {24, -0x1.81e52ap+1f},
        {24, -0x1.81e52ap+1f},
        {31, -0x1.4c8fd4p+1f},
        {34, -0x1.3d645cp+2f},
        {5, -0x1.701e0ep+1f}}},
      {"combined",
       combined,
       true,
       {{24, -0x1.7501a8p+1f},
        {57, -0x1.2c477ap+1f},
        {50, -0x1.57ea62p+1f},
        {43, -0x1.838d4ap+1f},
        {19, -0x1.0f3034p+1f},
        {50, -0x1.57ea62p+1f},
        {5, -0x1.0018fep+2f},
        {57, -0x1.2c477ap+1f}}},
  };
  const std::vector<float> logits = PinnedLogits();
  const std::vector<int32_t> prompt = {3, 5, 5, 9};
  const std::vector<int32_t> generated = {5, 12, 12, 40};
  Sampler sampler;
  for (const Case& c : cases) {
    const TokenHistory history = c.with_history ? TokenHistory{prompt, generated} : TokenHistory{};
    for (size_t i = 0; i < c.draws.size(); ++i) {
      const SampleResult r = sampler.Sample(logits, c.params, history, i);
      EXPECT_EQ(r.token_id, c.draws[i].token_id) << c.name << " draw " << i;
      // The chosen token's log-probability is computed only when log-probabilities are asked
      // for; the draw must not depend on that.
      SamplingParams with_logprobs = c.params;
      with_logprobs.logprobs = std::max<uint32_t>(1, c.params.logprobs);
      const SampleResult w = sampler.Sample(logits, with_logprobs, history, i);
      EXPECT_EQ(w.token_id, c.draws[i].token_id) << c.name << " draw " << i;
      EXPECT_EQ(w.logprob, c.draws[i].logprob) << c.name << " draw " << i;
      if (c.params.logprobs == 0) {
        EXPECT_EQ(r.logprob, 0.0f) << "not computed";
        continue;
      }
      EXPECT_EQ(r.logprob, c.draws[i].logprob) << c.name << " draw " << i;
      // Penalties and temperature shape the reported top too.
      ASSERT_EQ(r.top.size(), 3u) << c.name;
      EXPECT_EQ(r.top[0].token_id, 19);
      EXPECT_EQ(r.top[0].logprob, -0x1.0f3034p+1f);
      EXPECT_EQ(r.top[1].token_id, 38);
      EXPECT_EQ(r.top[1].logprob, -0x1.1dbbd6p+1f);
      EXPECT_EQ(r.top[2].token_id, 57);
      EXPECT_EQ(r.top[2].logprob, -0x1.2c477ap+1f);
    }
  }
}

TEST(SamplerTest, ValidationNamesTheField) {
  auto expect_bad = [](const SamplingParams& p, const char* field) {
    absl::Status s = ValidateSamplingParams(p, 100);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  SamplingParams p;
  EXPECT_TRUE(ValidateSamplingParams(p, 100).ok());
  p.temperature = -0.1f;
  expect_bad(p, "temperature");
  p = {};
  p.temperature = std::nanf("");
  expect_bad(p, "temperature");
  p = {};
  p.top_k = -1;
  expect_bad(p, "top_k");
  p = {};
  p.top_p = 0.0f;
  expect_bad(p, "top_p");
  p = {};
  p.top_p = 1.5f;
  expect_bad(p, "top_p");
  p = {};
  p.typical_p = 0.0f;
  expect_bad(p, "typical_p");
  p = {};
  p.typical_p = 1.01f;
  expect_bad(p, "typical_p");
  p = {};
  p.min_p = -0.5f;
  expect_bad(p, "min_p");
  p = {};
  p.repetition_penalty = 0.0f;
  expect_bad(p, "repetition_penalty");
  for (float bad : {1e-45f, 0.0099f, 10.01f, std::nanf(""), INFINITY}) {
    p.repetition_penalty = bad;  // 1e-45 once gave NaN log-probabilities
    expect_bad(p, "repetition_penalty");
  }
  for (float good : {kMinRepetitionPenalty, 1.0f, kMaxRepetitionPenalty}) {
    p.repetition_penalty = good;
    EXPECT_TRUE(ValidateSamplingParams(p, 100).ok()) << good;
  }
  p = {};
  p.frequency_penalty = 3.0f;
  expect_bad(p, "frequency_penalty");
  p = {};
  p.presence_penalty = -2.5f;
  expect_bad(p, "presence_penalty");
  p = {};
  p.stop_token_ids = {100};
  expect_bad(p, "stop_token_ids");
}

// The steps of Sample, one by one.

TEST(SamplerStepsTest, PenaltiesIgnoreIdsOutsideTheVocabulary) {
  std::vector<float> logits = {1.0f, -1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {-1, 0, 7};
  const std::vector<int32_t> generated = {2, 1};
  ApplyPenalties(absl::MakeSpan(logits), p, {prompt, generated});
  EXPECT_FLOAT_EQ(logits[0], 0.5f);   // prompt only: repetition
  EXPECT_FLOAT_EQ(logits[1], -3.0f);  // generated: repetition, then presence
}

TEST(SamplerStepsTest, TemperKeepsTheNormaliserOfTheScaledSoftmax) {
  const TemperedLogits tempered = Temper(kLogits, 0.5f);
  EXPECT_EQ(tempered.temperature, 0.5);
  EXPECT_EQ(tempered.argmax, 1);
  EXPECT_DOUBLE_EQ(tempered.max_scaled, 5.0);
  double z = 0.0;
  for (float l : kLogits) z += std::exp(l / 0.5);
  EXPECT_NEAR(tempered.log_z, std::log(z), 1e-6);  // float exponentials, summed in double
  EXPECT_NEAR(tempered.Logprob(kLogits, 6), 1.7 / 0.5 - std::log(z), 1e-6);
}

TEST(SamplerStepsTest, TemperAtZeroIsTheUnscaledSoftmaxAndTiesGoToTheLowerId) {
  const std::vector<float> tie = {0.0f, 3.0f, 1.0f, 3.0f};
  const TemperedLogits tempered = Temper(tie, 0.0f);
  EXPECT_EQ(tempered.temperature, 1.0);
  EXPECT_EQ(tempered.argmax, 1);
  // The exponentials are float (vec_math's Exp, <= 2 ulp), summed in double.
  EXPECT_NEAR(tempered.log_z, std::log(1.0 + 2 * std::exp(3.0) + std::exp(1.0)), 1e-6);
}

TEST(SamplerStepsTest, TopKSortsByLogitThenId) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  std::vector<int32_t> candidates;
  TopK(logits, 3, &candidates);
  EXPECT_EQ(candidates, (std::vector<int32_t>{1, 3, 2}));
  TopK(logits, 0, &candidates);
  EXPECT_EQ(candidates, (std::vector<int32_t>{1, 3, 2, 0, 4}));
  TopK(logits, 9, &candidates);
  EXPECT_EQ(candidates, (std::vector<int32_t>{1, 3, 2, 0, 4}));
}

// The radix sort gives the comparison order exactly: many ties, both zeros, infinities (a
// masked token), and vocabularies up to Gemma's.
TEST(SamplerStepsTest, SortByLogitDescIsTheComparisonOrder) {
  std::mt19937 rng(3);
  for (int32_t vocab : {1, 7, 1000, 262144}) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& l : logits) l = static_cast<float>(static_cast<int>(rng() % 64) - 32) / 4.0f;
    if (vocab > 4) {
      logits[1] = -0.0f;
      logits[2] = 0.0f;
      logits[3] = -std::numeric_limits<float>::infinity();
      logits[4] = std::numeric_limits<float>::infinity();
    }
    std::vector<int32_t> want(static_cast<size_t>(vocab));
    std::iota(want.begin(), want.end(), 0);
    std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    std::vector<int32_t> got, scratch;
    SortByLogitDesc(logits, &got, &scratch);
    EXPECT_EQ(got, want) << vocab;
  }
}

TEST(SamplerStepsTest, CandidateWeightsAreRelativeToTheArgmax) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  const TemperedLogits tempered = Temper(logits, 2.0f);
  const std::vector<int32_t> candidates = {1, 2};
  std::vector<double> weights;
  const double total = CandidateWeights(logits, tempered, candidates, &weights);
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_DOUBLE_EQ(weights[0], 1.0);
  EXPECT_DOUBLE_EQ(weights[1], std::exp(-0.5));
  EXPECT_DOUBLE_EQ(total, weights[0] + weights[1]);
}

TEST(SamplerStepsTest, TopPKeepsTheSmallestPrefixReachingTheMass) {
  const std::vector<double> weights = {5.0, 3.0, 2.0};  // total 10
  EXPECT_EQ(TopP(weights, 10.0, 1.0f), 3u);
  EXPECT_EQ(TopP(weights, 10.0, 0.7f), 2u);
  EXPECT_EQ(TopP(weights, 10.0, 0.5f), 1u);  // reaching counts
  EXPECT_EQ(TopP(weights, 10.0, 0.9f), 3u);
}

TEST(SamplerStepsTest, MinPDropsTheTailBelowAFractionOfTheTop) {
  const std::vector<double> weights = {1.0, 0.5, 0.25, 0.125};
  EXPECT_EQ(MinP(weights, 4, 0.0f), 4u);
  EXPECT_EQ(MinP(weights, 4, 0.3f), 2u);
  EXPECT_EQ(MinP(weights, 4, 0.25f), 3u);  // a weight on the floor stays
  EXPECT_EQ(MinP(weights, 1, 0.05f), 1u);
  EXPECT_EQ(MinP(weights, 3, 0.05f), 3u);  // never past what top-p kept
  EXPECT_EQ(MinP(weights, 4, 1.0f), 1u);   // the top always stays
}

TEST(SamplerStepsTest, TypicalKeepsTheTokensWhoseSurpriseIsNearestTheEntropy) {
  // p = 1/2, 1/4, 1/8, 1/8: entropy 1.75 ln 2; surprises ln 2, ln 4, ln 8, ln 8. Nearest
  // first: id 11 (|2 - 1.75| ln 2), then 10 (0.75 ln 2), then 12 and 13 (1.25 ln 2).
  const std::vector<int32_t> ids = {10, 11, 12, 13};
  const std::vector<double> w = {4.0, 2.0, 1.0, 1.0};  // unnormalised: mass 8
  auto typical = [&](float typical_p, size_t keep, std::vector<int32_t>* c) {
    *c = ids;
    std::vector<double> weights = w;
    const size_t n = Typical(c, &weights, keep, typical_p);
    for (size_t i = 0; i < c->size(); ++i) {  // weights follow their ids
      EXPECT_EQ(weights[i], w[std::find(ids.begin(), ids.end(), (*c)[i]) - ids.begin()]);
    }
    return n;
  };
  std::vector<int32_t> c;
  EXPECT_EQ(typical(1.0f, 4, &c), 4u);  // off: untouched
  EXPECT_EQ(c, ids);
  EXPECT_EQ(typical(0.2f, 4, &c), 1u);
  EXPECT_EQ(c, (std::vector<int32_t>{11, 10, 12, 13}));
  EXPECT_EQ(typical(0.75f, 4, &c), 2u);  // reaching counts
  EXPECT_EQ(typical(0.9f, 4, &c), 4u);
  EXPECT_EQ(typical(0.5f, 1, &c), 1u);  // one kept: nothing to choose
  // Over the first 2 only (p = 2/3, 1/3): their own entropy decides; the rest stay put.
  EXPECT_EQ(typical(0.5f, 2, &c), 1u);
  EXPECT_EQ(c[2], 12);
  EXPECT_EQ(c[3], 13);
}

TEST(SamplerTest, AMaskComesBeforeEveryStepLogprobsIncluded) {
  // kLogits has 1 best, then 4; allow only 0, 2 and 4 (bits 0, 2, 4 of byte 0).
  const std::vector<uint8_t> allowed = {0b10101};
  Sampler sampler;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 5;
  const SampleResult best = sampler.Sample(kLogits, greedy, {}, 0, allowed);
  EXPECT_EQ(best.token_id, 4);
  ASSERT_EQ(best.top.size(), 3u);  // the masked tokens are not alternatives
  double mass = 0.0;
  for (const TokenLogprob& t : best.top) {
    EXPECT_TRUE(t.token_id == 0 || t.token_id == 2 || t.token_id == 4) << t.token_id;
    mass += std::exp(t.logprob);
  }
  EXPECT_NEAR(mass, 1.0, 1e-5);  // a distribution over the allowed tokens alone
  SamplingParams sampled;
  sampled.temperature = 1.5f;
  sampled.repetition_penalty = 1.3f;
  const std::vector<int32_t> seen = {1, 4};
  for (uint64_t i = 0; i < 2000; ++i) {
    const int32_t id = sampler.Sample(kLogits, sampled, {seen, {}}, i, allowed).token_id;
    ASSERT_TRUE(id == 0 || id == 2 || id == 4) << id;
  }
}

TEST(SamplerStepsTest, DrawWalksTheCumulativeWeightsOfTheKeptPrefix) {
  const std::vector<double> weights = {1.0, 2.0, 1.0};  // cumulative 1, 3, 4
  EXPECT_EQ(Draw(weights, 3, 0.0), 0u);
  EXPECT_EQ(Draw(weights, 3, 0.24), 0u);
  EXPECT_EQ(Draw(weights, 3, 0.25), 1u);  // u = 1: the boundary belongs to the next
  EXPECT_EQ(Draw(weights, 3, 0.74), 1u);
  EXPECT_EQ(Draw(weights, 3, 0.75), 2u);
  EXPECT_EQ(Draw(weights, 3, 0.999), 2u);
  EXPECT_EQ(Draw(weights, 2, 0.9), 1u);  // scaled to the kept mass, 3
  EXPECT_EQ(Draw(weights, 1, 0.9), 0u);
}

TEST(SamplerStepsTest, TopLogprobsBestFirstClampedToTheVocabulary) {
  const TemperedLogits tempered = Temper(kLogits, 1.0f);
  std::vector<int32_t> scratch;
  const std::vector<TokenLogprob> top = TopLogprobs(kLogits, tempered, 2, &scratch);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].token_id, 1);
  EXPECT_EQ(top[1].token_id, 4);
  EXPECT_EQ(top[1].logprob, tempered.Logprob(kLogits, 4));
  EXPECT_EQ(TopLogprobs(kLogits, tempered, 100, &scratch).size(), kLogits.size());
}

}  // namespace
}  // namespace tpserve::engine
