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

// The kept results move out of the workspace (no GPU needed: sizes and the launchers' checks).
TEST(ChunkDeltaRuleStates, LeaveTheWorkspaceForTheCallerWhoKeepsThem) {
  ChunkDeltaParams p;
  p.batch = 2;
  p.seq_len = 100;  // 2 chunks per sequence
  p.heads = 2;
  p.k_dim = 128;
  p.v_dim = 64;
  // Every part 256-byte aligned.
  const size_t ut = 2 * 100 * 2 * 64 * 2;      // the new values, bf16 [B*T, H, V]
  const size_t states = 4 * 2 * 128 * 64 * 2;  // bf16 per chunk and head
  const size_t w = 2 * 100 * 2 * 128 * 2;      // W, bf16 [B*T, H, K]
  const size_t m = 4 * 2 * 64 * 64 * 2;        // M: bf16 64 x 64 per chunk and head
  const size_t matrix = 4 * 2 * 64 * 64 * 4;   // T and KD packed: fp32 64 x 64 per chunk, head
  const size_t kept_bytes = ut + states + w + m + matrix;
  EXPECT_EQ(DeltaRuleChunkStatesBytes(p), kept_bytes);
  EXPECT_EQ(GatedDeltaRuleChunkStatesBytes(p), kept_bytes);
  const size_t forward = DeltaRuleChunkWorkspaceBytes(p, false);
  const size_t backward = DeltaRuleChunkWorkspaceBytes(p, true);
  alignas(256) static unsigned char kept[512];
  p.chunk_states = kept;
  // The forward without M, W and the states; T and KD it writes only where they are kept.
  EXPECT_EQ(DeltaRuleChunkWorkspaceBytes(p, false), forward - (ut + states + w + m));
  // ... and the backward then needs no U = T diag(beta) V either (the size of the new values).
  EXPECT_EQ(DeltaRuleChunkWorkspaceBytes(p, true), backward - kept_bytes - ut);
  p.chunk_states = kept + 16;  // the launchers want them 256-byte aligned, like the workspace
  alignas(256) static unsigned char workspace[256];
  alignas(16) static __nv_bfloat16 tensor[8];
  static float beta[8];
  p.workspace = workspace;
  p.q = p.k = p.v = p.o = tensor;
  p.beta = beta;
  p.scale = 0.125f;
  p.qk_strides = ContiguousStrides(100, 2, 128);
  p.v_strides = ContiguousStrides(100, 2, 64);
  p.scalar_strides = ContiguousStrides(100, 2, 1);
  EXPECT_EQ(DeltaRuleChunkForward(p, nullptr), cudaErrorInvalidValue);
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
                      // K = 192: the state passes' three-slice instantiations.
                      DeltaCase{false, 1, 263, 3, 192, 128, kOddLengths, 0, true, true, 41},
                      // 64 heads: 256 mma.sync state-pass blocks, more than one per
                      // multiprocessor on the H200, where the launcher picks the backward pass's
                      // single-buffered variant (128 warpgroups of value columns: too few for the
                      // column passes).
                      DeltaCase{false, 1, 130, 64, 128, 128, {}, 0, false, true, 37},
                      // At least a warpgroup's 64 value columns per multiprocessor (132 on the
                      // H200): the column passes on warpgroup products, 128 columns a block
                      // (varlen, K = 64) and 64 (V = 64).
                      DeltaCase{false, 1, 130, 72, 128, 128, {}, 0, false, true, 38},
                      DeltaCase{false, 1, 263, 14, 64, 128, kOddLengths, 0, true, true, 39},
                      DeltaCase{false, 2, 100, 72, 128, 64, {}, 0, true, false, 40},
                      // K = 256 over 64 heads: the forward's column pass with single-buffered
                      // keys, 128 columns a block (chunk_delta_column_forward_split.cuh), in
                      // fewer waves than the mma.sync pass's blocks; dense and varlen.
                      DeltaCase{false, 1, 130, 64, 256, 256, {}, 0, true, true, 54},
                      DeltaCase{false, 1, 263, 64, 256, 256, kOddLengths, 0, false, true, 55},
                      // The kernels of GPUs without warpgroup products (sm_80) on this one: the
                      // mma.sync state passes and RowTermsKernel where the column passes and
                      // RowTermsWgmmaKernel would run.
                      DeltaCase{false, 1, 130, 72, 128, 128, {}, 0, false, true, 51, true},
                      DeltaCase{false, 1, 263, 14, 64, 128, kOddLengths, 0, true, true, 52, true},
                      // ... and the split backward pass (K = 256) copying by cp.async.
                      DeltaCase{false, 2, 77, 1, 256, 256, {}, 0, true, true, 53, true}),
    [](const ::testing::TestParamInfo<DeltaCase>& info) { return DeltaCaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
