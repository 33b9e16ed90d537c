// chunk_gated_delta_rule (with the Gated DeltaNet layer's in-kernel gate, beta sigmoid and q/k
// l2norm) on the GPU against the fp32 naive recurrence: outputs and all gradients (dq, dk, dv,
// db, da, dA_log, ddt_bias, dh0) over T not a multiple of 64, varlen batches with odd lengths,
// weak to strong decays (exp(A_log) from 0.01 to 100) and head dims 64-256. Skips without a GPU.
#include <gtest/gtest.h>

#include "tests/kernels/delta_rule_gpu_runner.h"

namespace flame::kernels::chunk_testing {
namespace {

class ChunkGatedDeltaRule : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(ChunkGatedDeltaRule, MatchesNaiveRecurrenceForwardAndBackward) {
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device";
  RunDeltaCaseOnGpu(GetParam());
}

const std::vector<int32_t> kOddLengths = {0, 1, 64, 129, 200, 263};  // 1, 63, 65, 71, 63

INSTANTIATE_TEST_SUITE_P(
    Grid, ChunkGatedDeltaRule,
    ::testing::Values(DeltaCase{true, 2, 100, 2, 64, 64, {}, 1.0f, true, true, 41},
                      DeltaCase{true, 1, 130, 2, 128, 128, {}, 0.01f, true, true, 42},
                      DeltaCase{true, 2, 77, 1, 256, 256, {}, 10.0f, true, true, 43},
                      DeltaCase{true, 1, 263, 2, 128, 64, kOddLengths, 0.1f, true, true, 44},
                      DeltaCase{true, 1, 263, 2, 64, 128, kOddLengths, 1.0f, true, false, 45},
                      DeltaCase{true, 1, 150, 4, 128, 128, {}, 100.0f, true, true, 46},
                      // 64 heads: the mma.sync backward pass's single-buffered variant; 72 and
                      // the varlen case's 28 x 5: the column passes (as in chunk_delta_rule_test).
                      DeltaCase{true, 1, 130, 64, 128, 128, {}, 1.0f, true, true, 47},
                      DeltaCase{true, 1, 130, 72, 128, 128, {}, 10.0f, true, true, 48},
                      DeltaCase{true, 1, 263, 28, 128, 64, kOddLengths, 0.1f, true, true, 49},
                      // K = 256 over 24 heads: 192 mma.sync pass blocks of 32 value columns, 96
                      // of 64, so both passes take 64 (one wave), the backward its split variant
                      // that forms MtdO itself (the smaller K = 256 cases take 32 columns).
                      DeltaCase{true, 1, 130, 24, 256, 256, {}, 1.0f, true, true, 50},
                      // ... and over 64 heads the forward's column pass with single-buffered keys
                      // (as in chunk_delta_rule_test), varlen.
                      DeltaCase{true, 1, 263, 64, 256, 256, kOddLengths, 10.0f, true, true, 52},
                      // The sm_80 kernels on this GPU (ChunkDeltaParams::portable_kernels).
                      DeltaCase{true, 1, 263, 28, 128, 64, kOddLengths, 0.1f, true, true, 51,
                                true}),
    [](const ::testing::TestParamInfo<DeltaCase>& info) { return DeltaCaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
