// chunk_simple_gla (per-head gate, and RetNet's constant decay) on the GPU against the fp32 naive
// recurrence: outputs and all gradients over T not a multiple of 64, varlen batches with odd
// lengths, weak to strong decays and head dims 64-256. The 72- and 16-head cases have enough
// state blocks for the state passes' 128-row variant (the small ones take 64-row blocks).
#include <gtest/gtest.h>

#include "tests/kernels/chunk_gated_runner.h"

namespace flame::kernels::chunk_testing {
namespace {

class ChunkSimpleGla : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkSimpleGla, MatchesNaiveRecurrenceForwardAndBackward) {
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  RunCase(GetParam());
}

const std::vector<int32_t> kOddLengths = {0, 1, 64, 129, 200, 263};  // 1, 63, 65, 71, 63

INSTANTIATE_TEST_SUITE_P(
    Grid, ChunkSimpleGla,
    ::testing::Values(Case{Family::kSimpleGla, 2, 100, 2, 64, 64, {}, 1.0f, true, 21},
                      Case{Family::kSimpleGla, 1, 130, 2, 128, 128, {}, 0.01f, true, 22},
                      Case{Family::kSimpleGla, 2, 77, 1, 256, 256, {}, 10.0f, true, 23},
                      Case{Family::kSimpleGla, 1, 263, 2, 128, 64, kOddLengths, 0.1f, true, 24},
                      Case{Family::kSimpleGla, 1, 263, 2, 64, 128, kOddLengths, 1.0f, false, 25},
                      Case{Family::kRetention, 2, 150, 4, 128, 128, {}, 1.0f, true, 26},
                      Case{Family::kRetention, 1, 263, 2, 256, 128, kOddLengths, 1.0f, true, 27},
                      Case{Family::kSimpleGla, 2, 100, 72, 128, 128, {}, 0.1f, true, 28},
                      Case{Family::kRetention, 1, 263, 16, 256, 128, kOddLengths, 1.0f, true, 29},
                      // V > 256: dq, dk per K slice, dg from their sums, dv by its own kernel.
                      Case{Family::kSimpleGla, 1, 130, 2, 256, 384, {}, 1.0f, true, 30}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
