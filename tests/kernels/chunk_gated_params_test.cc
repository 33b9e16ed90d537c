// Host-side contract of the gated chunk launchers, checked without a GPU: chunk offsets for
// varlen batches, workspace sizes, and the parameter checks that reject a call before any CUDA
// work is issued (so they hold on CPU-only CI hosts too).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/gla/chunk_gla.h"
#include "kernels/simple_gla/chunk_simple_gla.h"

namespace flame::kernels {
namespace {

TEST(ChunkOffsets, CountsPartialChunksOfEverySequence) {
  // Lengths 1, 63, 65, 71, 63 -> 1, 1, 2, 2, 1 chunks of 64.
  EXPECT_EQ(ChunkOffsets({0, 1, 64, 129, 200, 263}), (std::vector<int32_t>{0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(ChunkOffsets({0, 128}), (std::vector<int32_t>{0, 2}));
}

ChunkGatedParams ValidUniformParams() {
  alignas(16) static __nv_bfloat16 tensor[8];
  alignas(16) static float gate[8];
  ChunkGatedParams p;
  p.batch = 2;
  p.seq_len = 100;
  p.heads = 2;
  p.k_dim = 128;
  p.v_dim = 64;
  p.scale = 0.125f;
  p.q = p.k = p.v = tensor;
  p.o = tensor;
  p.qk_strides = ContiguousStrides(100, 2, 128);
  p.v_strides = ContiguousStrides(100, 2, 64);
  p.g = gate;
  p.g_strides = ContiguousStrides(100, 2, 128);
  p.intra_scores = tensor;
  return p;
}

TEST(GatedChunkWorkspace, HoldsTheStatesAndEachGateKindsScratch) {
  const ChunkGatedParams p = ValidUniformParams();
  // 2 sequences x 2 chunks = 4 chunks, 2 heads, K = 128, V = 64; every part 256-byte aligned.
  const size_t states = 4 * 2 * 128 * 64 * 2;     // bf16 per chunk and head (twice backward)
  // Head gate, backward, V > 256 only (below, one block per chunk and head sums dg itself): the
  // K slices' dg sums, 4 x 2 x 2 x 129 fp32.
  const size_t dg_sums = 8448;
  const size_t channel_decays = 4 * 2 * 128 * 4;  // channel gate: fp32 per chunk and key channel
  // Channel gate: two bf16 decayed copies of q or k (the output kernel's operand, the state
  // pass's other one).
  const size_t decayed = 4 * 2 * 64 * 128 * 2;
  EXPECT_EQ(SimpleGlaChunkWorkspaceBytes(p, false), states);
  EXPECT_EQ(SimpleGlaChunkWorkspaceBytes(p, true), 2 * states);
  ChunkGatedParams wide_v = p;
  wide_v.v_dim = 320;
  EXPECT_EQ(SimpleGlaChunkWorkspaceBytes(wide_v, true), 2 * 5 * states + dg_sums);
  EXPECT_EQ(GlaChunkWorkspaceBytes(p, false), states + channel_decays + 2 * decayed);
  EXPECT_EQ(GlaChunkWorkspaceBytes(p, true), 2 * states + channel_decays + 2 * decayed);
  // The scores are the caller's, kept from the forward: bf16 64 x 64 per chunk and head.
  EXPECT_EQ(GlaChunkScoresBytes(p), size_t{4} * 2 * 64 * 64 * 2);
  EXPECT_EQ(SimpleGlaChunkScoresBytes(p), size_t{4} * 2 * 64 * 64 * 2);
}

TEST(GatedChunkWorkspace, LeavesTheStatesToTheCallerWhoKeepsThem) {
  ChunkGatedParams p = ValidUniformParams();
  alignas(16) static __nv_bfloat16 kept[8];
  p.chunk_states = kept;
  const size_t states = 4 * 2 * 128 * 64 * 2;
  EXPECT_EQ(SimpleGlaChunkStatesBytes(p), states);
  EXPECT_EQ(GlaChunkStatesBytes(p), states);
  const size_t channel_decays = 4 * 2 * 128 * 4, decayed = 4 * 2 * 64 * 128 * 2;
  EXPECT_EQ(SimpleGlaChunkWorkspaceBytes(p, false), 0u);
  EXPECT_EQ(SimpleGlaChunkWorkspaceBytes(p, true), states);
  EXPECT_EQ(GlaChunkWorkspaceBytes(p, false), channel_decays + 2 * decayed);
  // The channel gate's backward keeps room to recompute them: its scan path does.
  EXPECT_EQ(GlaChunkWorkspaceBytes(p, true), 2 * states + channel_decays + 2 * decayed);
}

TEST(GatedChunkLaunchers, RejectMisalignedKeptStates) {
  ChunkGatedParams p = ValidUniformParams();
  alignas(16) static unsigned char workspace[16];
  alignas(16) static __nv_bfloat16 kept[16];
  p.workspace = workspace;
  p.chunk_states = kept + 1;  // 2-byte aligned
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SimpleGlaChunkForward(p, nullptr), cudaErrorInvalidValue);
}

TEST(GatedChunkLaunchers, RejectMissingOrMisalignedScores) {
  ChunkGatedParams p = ValidUniformParams();
  alignas(16) static unsigned char workspace[16];
  p.workspace = workspace;
  p.d_o = p.dq = p.dk = p.dv = p.intra_scores;
  static float dg[8];
  p.dg = dg;
  __nv_bfloat16* const scores = p.intra_scores;
  for (__nv_bfloat16* bad : {static_cast<__nv_bfloat16*>(nullptr), scores + 1 /* 2-byte */}) {
    p.intra_scores = bad;
    EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(GlaChunkBackward(p, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(SimpleGlaChunkForward(p, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(SimpleGlaChunkBackward(p, nullptr), cudaErrorInvalidValue);
  }
}

TEST(GatedChunkLaunchers, RejectHeadDimsThatAreNotMultiplesOf64) {
  ChunkGatedParams p = ValidUniformParams();
  p.k_dim = 96;
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SimpleGlaChunkForward(p, nullptr), cudaErrorInvalidValue);
}

TEST(GatedChunkLaunchers, RejectMissingWorkspaceOrGate) {
  ChunkGatedParams p = ValidUniformParams();
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);  // no workspace
  alignas(16) static unsigned char workspace[16];
  p.workspace = workspace;
  p.g = nullptr;
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);  // gla needs g
  // simple gla takes exactly one of g and g_gamma.
  static float gamma[2];
  p.g_gamma = gamma;
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);
  p.g = ValidUniformParams().g;
  EXPECT_EQ(SimpleGlaChunkForward(p, nullptr), cudaErrorInvalidValue);
}

TEST(GatedChunkLaunchers, RejectVarlenWithoutChunkOffsetsOrWithBatchAboveOne) {
  ChunkGatedParams p = ValidUniformParams();
  alignas(16) static unsigned char workspace[16];
  p.workspace = workspace;
  static int32_t cu_seqlens[3] = {0, 50, 100};
  p.cu_seqlens = cu_seqlens;
  p.num_seqs = 2;
  p.total_chunks = 2;
  p.batch = 1;
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);  // no chunk_offsets
  static int32_t offsets[3] = {0, 1, 2};
  p.chunk_offsets = offsets;
  p.batch = 2;
  EXPECT_EQ(GlaChunkForward(p, nullptr), cudaErrorInvalidValue);  // packed batches have B = 1
}

TEST(GatedChunkLaunchers, RejectBackwardWithoutGateGradient) {
  ChunkGatedParams p = ValidUniformParams();
  alignas(16) static unsigned char workspace[16];
  alignas(16) static __nv_bfloat16 grads[8];
  p.workspace = workspace;
  p.d_o = p.dq = p.dk = p.dv = grads;
  EXPECT_EQ(GlaChunkBackward(p, nullptr), cudaErrorInvalidValue);  // g given, dg missing
}

}  // namespace
}  // namespace flame::kernels
