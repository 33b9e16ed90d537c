// chunk_gla on the GPU against the fp32 naive recurrence: outputs and all gradients over T not a
// multiple of 64, varlen batches with odd lengths, weak to strong decays and head dims 64-256.
// The 72- and 40-head cases have enough state blocks for the sequential state pass, the small
// ones take each chunk's update and the scan over the chunks (ChunkGlaStates checks which).
#include <gtest/gtest.h>

#include "kernels/gla/chunk_gla.h"
#include "tests/kernels/chunk_gated_runner.h"

namespace flame::kernels::chunk_testing {
namespace {

class ChunkGla : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkGla, MatchesNaiveRecurrenceForwardAndBackward) {
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  RunCase(GetParam());
}

const std::vector<int32_t> kOddLengths = {0, 1, 64, 129, 200, 263};  // 1, 63, 65, 71, 63

INSTANTIATE_TEST_SUITE_P(
    Grid, ChunkGla,
    ::testing::Values(Case{Family::kGla, 2, 100, 2, 64, 64, {}, 1.0f, true, 11},
                      Case{Family::kGla, 1, 130, 2, 128, 128, {}, 0.01f, true, 12},
                      Case{Family::kGla, 2, 77, 1, 256, 256, {}, 10.0f, true, 13},
                      Case{Family::kGla, 1, 263, 2, 128, 64, kOddLengths, 0.1f, true, 14},
                      Case{Family::kGla, 1, 263, 1, 64, 128, kOddLengths, 16.0f, false, 15},
                      Case{Family::kGla, 2, 191, 2, 128, 128, {}, 16.0f, false, 16},
                      Case{Family::kGla, 2, 100, 72, 128, 128, {}, 0.1f, true, 17},
                      Case{Family::kGla, 1, 263, 40, 256, 128, kOddLengths, 1.0f, true, 18}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// The grid above covers both ways to the states only if its cases take them (the H200 has room
// for about 400 pass blocks at a time; a small case runs a few dozen).
TEST(ChunkGlaStates, GridCasesTakeBothWays) {
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  const auto uses_pass = [](int seqs, int heads, int k_dim, int v_dim, bool backward) {
    ChunkGatedParams p;
    p.batch = seqs;
    p.heads = heads;
    p.k_dim = k_dim;
    p.v_dim = v_dim;
    bool uses = false;
    EXPECT_EQ(GlaChunkUsesStatePass(p, backward, &uses), cudaSuccess);
    return uses;
  };
  for (bool backward : {false, true}) {
    EXPECT_FALSE(uses_pass(2, 1, 256, 256, backward));  // case 13: the most blocks of 11-16
    EXPECT_TRUE(uses_pass(2, 72, 128, 128, backward));  // case 17
    EXPECT_TRUE(uses_pass(5, 40, 256, 128, backward));  // case 18: five varlen sequences
  }
}

}  // namespace
}  // namespace flame::kernels::chunk_testing
