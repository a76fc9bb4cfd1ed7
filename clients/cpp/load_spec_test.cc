// tpserve-bench's pure parts: length distributions, reproducible requests, percentiles and
// the summary arithmetic.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "clients/cpp/bench_report.h"
#include "clients/cpp/load_spec.h"

namespace tpserve::client {
namespace {

TEST(LoadSpecTest, ParsesDistributions) {
  auto fixed = LengthDistribution::Parse("fixed:32");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->min, 32);
  EXPECT_EQ(fixed->max, 32);
  auto uniform = LengthDistribution::Parse("uniform:4:9");
  ASSERT_TRUE(uniform.ok());
  std::mt19937_64 rng(3);
  std::vector<int> seen(10, 0);
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = uniform->Draw(rng);
    ASSERT_GE(v, 4);
    ASSERT_LE(v, 9);
    ++seen[v];
  }
  for (int v = 4; v <= 9; ++v) EXPECT_GT(seen[v], 200) << v;
  for (const char* bad : {"", "fixed", "fixed:0", "fixed:x", "uniform:5:4", "normal:3:4"}) {
    EXPECT_FALSE(LengthDistribution::Parse(bad).ok()) << bad;
  }
}

TEST(LoadSpecTest, RequestsAreReproducibleAndInRange) {
  tpserve::v1::GenerateRequest sampling;
  sampling.set_temperature(0);
  RequestFactory f(*LengthDistribution::Parse("uniform:5:20"),
                   *LengthDistribution::Parse("fixed:7"), {}, 42, 1000, 2000, sampling);
  const tpserve::v1::GenerateRequest a = f.Make(3);
  EXPECT_EQ(a.SerializeAsString(), f.Make(3).SerializeAsString());
  EXPECT_NE(a.SerializeAsString(), f.Make(4).SerializeAsString());
  EXPECT_EQ(a.max_tokens(), 7u);
  EXPECT_TRUE(a.has_temperature());
  EXPECT_GE(a.prompt_token_ids_size(), 5);
  EXPECT_LE(a.prompt_token_ids_size(), 20);
  for (int32_t id : a.prompt_token_ids()) {
    EXPECT_GE(id, 1000);
    EXPECT_LE(id, 2000);
  }
  RequestFactory text(*LengthDistribution::Parse("fixed:1"), *LengthDistribution::Parse("fixed:2"),
                      {"a", "b"}, 1, 0, 1, sampling);
  EXPECT_EQ(text.Make(0).prompt(), "a");
  EXPECT_EQ(text.Make(3).prompt(), "b");
}

TEST(LoadSpecTest, SharedPrefixStartsEveryPrompt) {
  tpserve::v1::GenerateRequest sampling;
  RequestFactory f(*LengthDistribution::Parse("fixed:4"), *LengthDistribution::Parse("fixed:1"), {},
                   9, 1000, 50000, sampling, /*shared_prefix_len=*/6);
  const tpserve::v1::GenerateRequest a = f.Make(0), b = f.Make(1);
  ASSERT_EQ(a.prompt_token_ids_size(), 10);
  ASSERT_EQ(b.prompt_token_ids_size(), 10);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.prompt_token_ids(i), b.prompt_token_ids(i));
  bool own_differs = false;
  for (int i = 6; i < 10; ++i) own_differs |= a.prompt_token_ids(i) != b.prompt_token_ids(i);
  EXPECT_TRUE(own_differs);
}

TEST(BenchReportTest, PercentilesInterpolate) {
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(Percentile(&v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(&v, 50), 3);
  EXPECT_DOUBLE_EQ(Percentile(&v, 100), 5);
  EXPECT_DOUBLE_EQ(Percentile(&v, 90), 4.6);
  std::vector<double> none;
  EXPECT_EQ(Percentile(&none, 50), 0);
}

TEST(BenchReportTest, SummaryCountsTokensLatenciesErrorsAndResumes) {
  RequestRecord a{0.0, 1.0, {0.2, 0.5, 1.0}, 10, 3, "", /*resumes=*/2};
  RequestRecord b{0.5, 1.5, {0.6, 1.5}, 12, 2, ""};
  RequestRecord c{0.1, 0.2, {}, 0, 0, "UNAVAILABLE", /*resumes=*/1};
  const nlohmann::json s = Summarize({a, b, c}, 2.0, {{"label", "x"}});
  EXPECT_EQ(s["requests"], 3);
  EXPECT_EQ(s["ok"], 2);
  EXPECT_EQ(s["errors"]["UNAVAILABLE"], 1);
  EXPECT_EQ(s["resumes"], 3);  // failed requests' resends count too
  EXPECT_EQ(s["output_tokens"], 5);
  EXPECT_DOUBLE_EQ(s["output_tokens_per_s"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(s["requests_per_s"].get<double>(), 1.0);
  EXPECT_EQ(s["ttft_s"]["count"], 2);
  EXPECT_NEAR(s["ttft_s"]["mean"].get<double>(), 0.15, 1e-12);
  EXPECT_EQ(s["itl_s"]["count"], 3);  // 0.3, 0.5 and 0.9
  EXPECT_NEAR(s["itl_s"]["p50"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(s["e2e_s"]["p50"].get<double>(), 1.0, 1e-12);
  EXPECT_EQ(s["config"]["label"], "x");
  EXPECT_EQ(SummaryLine(s),
            "2/3 ok in 2 s; 1 errors {UNAVAILABLE: 1}; 3 resumes; 2.5 output tokens/s; "
            "TTFT p50 0.15 s; ITL p50 0.5 s");
}

}  // namespace
}  // namespace tpserve::client
