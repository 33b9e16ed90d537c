// chunk_delta_rule on the GPU against the fp32 naive recurrence: outputs and all gradients over T
// not a multiple of 64, varlen batches with odd lengths, with and without the in-kernel q/k l2norm,
// head dims 64-256. Skips without a GPU.
#include <gtest/gtest.h>

#include "tests/kernels/delta_rule_gpu_runner.h"

namespace flame::kernels::chunk_testing {
namespace {

class ChunkDeltaRule : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(ChunkDeltaRule, MatchesNaiveRecurrenceForwardAndBackward) {
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  RunDeltaCaseOnGpu(GetParam());
}

const std::vector<int32_t> kOddLengths = {0, 1, 64, 129, 200, 263};  // 1, 63, 65, 71, 63

INSTANTIATE_TEST_SUITE_P(
    Grid, ChunkDeltaRule,
    ::testing::Values(DeltaCase{false, 2, 100, 2, 64, 64, {}, 0, true, true, 31},
                      DeltaCase{false, 1, 130, 2, 128, 128, {}, 0, true, true, 32},
                      DeltaCase{false, 2, 77, 1, 256, 256, {}, 0, true, true, 33},
                      DeltaCase{false, 1, 263, 2, 128, 64, kOddLengths, 0, true, true, 34},
                      DeltaCase{false, 1, 263, 2, 64, 128, kOddLengths, 0, false, false, 35},
                      DeltaCase{false, 2, 150, 4, 128, 128, {}, 0, false, true, 36},
                      // 72 heads: 288 state-pass blocks, more than one per multiprocessor on the
                      // H200, where the launcher picks the backward pass's single-buffered variant.
                      DeltaCase{false, 1, 130, 72, 128, 128, {}, 0, false, true, 37}),
    [](const ::testing::TestParamInfo<DeltaCase>& info) { return DeltaCaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
