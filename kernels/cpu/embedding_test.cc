#include "kernels/cpu/embedding.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/embedding.h"
#include "kernels/cpu/test_util.h"

namespace tpserve::kernels::cpu {
namespace {

using testing::BitEqual;
using testing::RandomVector;

TEST(EmbeddingTest, GathersRows) {
  for (int64_t d : {1, 3, 17, 576}) {
    const int64_t vocab = 101;
    const std::vector<float> table = RandomVector(vocab * d, 1);  // [vocab, d]
    const std::vector<int32_t> ids = {0, 100, 5, 5, 63};          // [m]
    const int64_t m = static_cast<int64_t>(ids.size());
    std::vector<float> out(m * d), ref(m * d);
    GatherRows(table.data(), vocab, ids.data(), m, d, out.data());
    reference::GatherRows(table.data(), ids.data(), m, d, ref.data());
    EXPECT_TRUE(BitEqual(out.data(), ref.data(), m * d)) << d;
  }
}

TEST(EmbeddingDeathTest, RejectsOutOfRangeIds) {
  const std::vector<float> table(4 * 2, 0.0f);
  std::vector<float> out(2);
  const int32_t bad = 4;
  EXPECT_DEATH(GatherRows(table.data(), 4, &bad, 1, 2, out.data()), "outside");
}

}  // namespace
}  // namespace tpserve::kernels::cpu
