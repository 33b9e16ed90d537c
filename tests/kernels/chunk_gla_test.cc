// chunk_gla on the GPU against the fp32 naive recurrence: outputs and all gradients over T not a
// multiple of 64, varlen batches with odd lengths, weak to strong decays and head dims 64-256.
#include <gtest/gtest.h>

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
                      Case{Family::kGla, 2, 191, 2, 128, 128, {}, 16.0f, false, 16}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
