// Chunked gated linear attention on tensor cores: the launchers shared by chunk_simple_gla
// (per-head gate) and chunk_gla (per-channel gate). Only kernels/simple_gla/*.cu and
// kernels/gla/*.cu include this file; each instantiates one gate kind.
//
// Algorithm (fla's chunk form, chunk BT = 64; see ../shared/reference/fla.md §2.3-2.4):
//   G     chunk-local inclusive cumsum of the natural-log gate, times 1/ln2 (fp32); decays are
//         exp2 of differences, always arranged so that the exponent is <= 0.
//   h_c   state entering chunk c (K x V):  h_{c+1} = diag(2^G_last) h_c + (K * 2^(G_last-G))^T V
//   o     scale * [(Q * 2^G) h_c + tril(A) V],  A_ij = sum_k q_ik k_jk 2^(G_ik - G_jk)
//   dh_c  gradient of the state leaving chunk c:
//         dh_{c-1} = diag(2^G_last) dh_c + scale (Q*2^G)^T dO
//   dg    reverse cumsum over the sequence of (q dq - k dk), rewritten per chunk so that it
//         needs no pass over the sequence (see chunk_gated_channel.cuh).
// States are stored per chunk in bf16 (fla does the same in its forward); the running state and
// every accumulator are fp32.
//
// Kernels (256 threads on 64 x 64 tiles but where said; K, V any multiple of 64):
//   head gate:           HeadStatePassKernel (128 or 256 threads), the per-chunk states h_c
//                        (forward) and dh_c (backward) by one sequential pass per state tile
//                        (chunk_gated_head_state_pass.cuh)
//   channel gate:        StatePassKernel, such a pass from decayed operands
//                        (chunk_gated_state_pass.cuh; ChannelScoresKernel writes the
//                        forward's, ChunkDecayKernel the backward's) where its grid fills enough
//                        of the GPU; else ChunkUpdateKernel + StateScanKernel, each chunk's own
//                        update in parallel, then an elementwise scan over the chunks
//                        (chunk_gated_states.cuh)
//   head gate:           HeadChunkOutputKernel (K <= 128) or HeadOutputKernel (o, and the
//                        scores, kept for the backward in intra_scores; or dv where V > 256),
//                        HeadChunkGradQKKernel (V <= 256: dq, dk, the dg sums and dv) or
//                        HeadGradQKKernel (dq, dk, the dg sums), and HeadGateGradKernel (dg);
//                        chunk_gated_head_output.cuh, chunk_gated_head_grad_qk.cuh
//   channel gate:        ChannelScoresKernel (forward: the scores, kept for the backward in
//                        intra_scores, and the decayed operands) + ChannelOutputKernel (o or dv),
//                        ChannelGradQKKernel (dq, dk, dg, and, without the state pass, the
//                        decayed keys for dv); chunk_gated_channel.cuh
// Kernels that serve one gate kind are templates on it (or on another parameter) so that this
// header can define them in both launchers' translation units.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_channel.cuh"
#include "kernels/common/chunk_gated_head_grad_qk.cuh"
#include "kernels/common/chunk_gated_head_output.cuh"
#include "kernels/common/chunk_gated_head_state_pass.cuh"
#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_state_pass.cuh"
#include "kernels/common/chunk_gated_states.cuh"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/launch_checks.h"
#include "kernels/common/launch_waves.h"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// ----------------------------------------------------------------------------------------------
// Host side

inline int NumSeqs(const ChunkGatedParams& p) {
  return p.cu_seqlens != nullptr ? p.num_seqs : p.batch;
}

inline int TotalChunks(const ChunkGatedParams& p) {
  return p.cu_seqlens != nullptr ? p.total_chunks
                                 : p.batch * ((p.seq_len + kBT - 1) / kBT);
}

// bf16 K x V states for `blocks` chunks and every head.
inline size_t StateBytes(const ChunkGatedParams& p, int blocks) {
  return static_cast<size_t>(blocks) * p.heads * p.k_dim * p.v_dim * sizeof(bf16);
}

inline size_t AlignUp(size_t x) { return (x + 255) / 256 * 256; }

// The workspace, in this order: the per-chunk states h (bf16; the caller's chunk_states instead
// where it keeps them -- but the channel gate's backward keeps room to recompute them, which its
// scan path does); backward: their gradients dh; head gate, backward: HeadGradQKKernel's
// per-slice dg sums (V > 256); channel gate: the chunks' decays
// (StateScanKernel's factors, or the state pass's row decays), `decayed`, the decayed operand X
// of ChannelOutputKernel (forward q scale 2^G from ChannelScoresKernel; backward k 2^(G_last - G),
// from ChannelGradQKKernel, or, with the state pass, from ChunkDecayKernel as the pass's decayed
// keys), and `pass_operand`, the state pass's other decayed operand (forward its keys, backward
// its queries q scale 2^G). The scores are the caller's (intra_scores), kept from the forward for
// the backward.
struct Workspace {
  bf16* states = nullptr;
  bf16* d_states = nullptr;
  float* decays = nullptr;
  float* grad_parts = nullptr;
  bf16* decayed = nullptr;
  bf16* pass_operand = nullptr;
};

// Carves `base` (null: only counts) into w for `chunks` chunks; returns the bytes it takes.
inline size_t CarveWorkspace(const ChunkGatedParams& p, void* base, int chunks, Gate gate,
                             bool backward, Workspace& w) {
  size_t used = 0;
  auto take = [&](size_t bytes) -> void* {
    void* at = base != nullptr ? static_cast<unsigned char*>(base) + used : nullptr;
    used += AlignUp(bytes);
    return at;
  };
  const bool kept = p.chunk_states != nullptr;
  w.states = kept ? p.chunk_states : nullptr;
  if (!kept || (backward && gate == Gate::kChannel)) {
    w.states = static_cast<bf16*>(take(StateBytes(p, chunks)));
  }
  if (backward) w.d_states = static_cast<bf16*>(take(StateBytes(p, chunks)));
  if (gate == Gate::kHead) {
    if (backward && p.v_dim > kChunkGradMaxV) {
      w.grad_parts = static_cast<float*>(take(GradPartsBytes(p, chunks)));
    }
  } else {
    w.decays = static_cast<float*>(take(DecaysBytes(p, chunks)));
    w.decayed = static_cast<bf16*>(take(DecayedBytes(p, chunks)));
    w.pass_operand = static_cast<bf16*>(take(DecayedBytes(p, chunks)));
  }
  return used;
}

inline size_t WorkspaceBytes(const ChunkGatedParams& p, Gate gate, bool backward) {
  Workspace unused;
  return CarveWorkspace(p, nullptr, TotalChunks(p), gate, backward, unused);
}

inline cudaError_t Validate(const ChunkGatedParams& p, Gate gate, bool backward) {
  const bool shapes = p.heads > 0 && p.k_dim > 0 && p.v_dim > 0 && p.k_dim % kBK == 0 &&
                      p.v_dim % kBK == 0 && p.seq_len > 0 &&
                      (p.cu_seqlens == nullptr ? p.batch > 0
                                               : p.batch == 1 && p.num_seqs > 0 &&
                                                     p.chunk_offsets != nullptr &&
                                                     p.total_chunks > 0);
  const bool gates = gate == Gate::kChannel ? p.g != nullptr
                                            : (p.g != nullptr) != (p.g_gamma != nullptr);
  const bool scores =
      p.intra_scores != nullptr && IsAligned16(p.intra_scores) && IsAligned16(p.chunk_states);
  const bool inputs = p.q && p.k && p.v && IsAligned16(p.q) && IsAligned16(p.k) &&
                      IsAligned16(p.v) && Bf16RowsAligned(p.qk_strides) &&
                      Bf16RowsAligned(p.v_strides) && p.workspace;
  const bool outputs = backward ? p.d_o && p.dq && p.dk && p.dv && IsAligned16(p.d_o) &&
                                      IsAligned16(p.dv) && (p.dg != nullptr || p.g == nullptr)
                                : p.o != nullptr && IsAligned16(p.o);
  // StateScanKernel moves the fp32 states four entries at a time (StatePassKernel two).
  const bool states = IsAligned16(p.initial_state) && IsAligned16(p.final_state) &&
                      IsAligned16(p.d_final_state) && IsAligned16(p.d_initial_state);
  return shapes && gates && scores && inputs && outputs && states ? cudaSuccess
                                                                 : cudaErrorInvalidValue;
}

// Raises the kernel's dynamic shared-memory limit (needed above 48 KB) and launches it with
// `threads` threads per block.
template <typename... Args>
cudaError_t LaunchKernelWith(void (*kernel)(ChunkGatedParams, Args...), dim3 grid, int threads,
                             size_t smem, cudaStream_t stream, const ChunkGatedParams& p,
                             Args... args) {
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  kernel<<<grid, threads, smem, stream>>>(p, args...);
  return cudaGetLastError();
}

// LaunchKernelWith for the kThreads-thread blocks of all but the head gate's state pass.
template <typename... Args>
cudaError_t LaunchKernel(void (*kernel)(ChunkGatedParams, Args...), dim3 grid, size_t smem,
                         cudaStream_t stream, const ChunkGatedParams& p, Args... args) {
  return LaunchKernelWith<Args...>(kernel, grid, kThreads, smem, stream, p, args...);
}

// The state passes (chunk_gated_state_pass.cuh, chunk_gated_head_state_pass.cuh), kNk 64-row key
// slices per block: the grid StatePassKernel and HeadStatePassKernel expect.
template <int kNk>
dim3 StatePassGrid(const ChunkGatedParams& p, int passes) {
  return dim3(p.k_dim / (kNk * kBK) * (p.v_dim / kBK), p.heads, p.num_seqs * passes);
}

// The number of passes the states take: the forward's one; the backward's two, or the reverse
// pass alone where the caller kept the forward's states.
inline int StatePasses(const ChunkGatedParams& p, bool backward) {
  return backward && p.chunk_states == nullptr ? 2 : 1;
}

template <Gate kGate, int kNk>
cudaError_t LaunchStatePass(const ChunkGatedParams& p, bool backward, PassSet passes,
                            const Workspace& w, cudaStream_t stream) {
  const DecayedOperands decayed = backward ? DecayedOperands{w.decayed, w.pass_operand, w.decays}
                                           : DecayedOperands{w.pass_operand, nullptr, w.decays};
  return LaunchKernel<PassSet, bf16*, bf16*, DecayedOperands>(
      StatePassKernel<kGate, kNk>, StatePassGrid<kNk>(p, passes.count),
      kStatePassSmemBytes<kGate, kNk>, stream, p, passes, w.states, w.d_states, decayed);
}

// The head gate's pass (chunk_gated_head_state_pass.cuh): 128 kNk-thread blocks, one per
// 64 kNk x 64 state tile.
template <Gate kGate, int kNk>
cudaError_t LaunchHeadStatePass(const ChunkGatedParams& p, PassSet passes, const Workspace& w,
                                cudaStream_t stream) {
  return LaunchKernelWith<PassSet, bf16*, bf16*>(
      HeadStatePassKernel<kGate, kNk>, StatePassGrid<kNk>(p, passes.count), kHeadPassThreads<kNk>,
      kHeadPassSmemBytes<kNk>, stream, p, passes, w.states, w.d_states);
}

// The head gate's pass takes 128 key rows per block (kNk = 2) where K allows and that leaves no
// SM more of the pass's work: a kNk = 2 block does the work of two kNk = 1 blocks (its eight warps
// share the value tiles' copies and reads), so dealt round the SMs, the busiest SM carries
// kNk ceil(blocks / SMs) 64-row tiles. Where both carry as much, kNk = 2. Measured on the H200
// (forward + backward, kNk = 1 / 2): 0.326 / 0.322 ms at (4,2048,16,128), 0.626 / 0.599 at
// (8,2048,16,128), 1.299 / 1.527 at (2,16384,16,128) (128 blocks / 64: half the SMs idle),
// 1.821 / 1.891 at (1,8192,96,128) (384 / 192: three tiles per SM against four), 2.185 / 2.103
// at (8,4096,8,256) -- the rule's choice at every one.
inline cudaError_t PickHeadPassKeySlices(const ChunkGatedParams& p, int passes, int* slices) {
  *slices = 1;
  if (p.k_dim % (2 * kBK) != 0) return cudaSuccess;
  int sms = 0;
  if (cudaError_t err = MultiprocessorCount(&sms); err != cudaSuccess) return err;
  const auto busiest = [&](int nk) {  // 64-row tiles on the busiest SM
    const dim3 grid = nk == 1 ? StatePassGrid<1>(p, passes) : StatePassGrid<2>(p, passes);
    const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
    return nk * ((blocks + sms - 1) / sms);
  };
  if (busiest(2) <= busiest(1)) *slices = 2;
  return cudaSuccess;
}

// The channel gate's pass takes 128 key rows per block (kNk = 2) where K allows and it saves
// enough waves of blocks: the value tiles are then read by half the blocks, but such a block
// takes ~1.3x as long as a 64-row block (measured on the H200 with the head gate, whose pass this
// was then: two blocks per SM against three) -- so with as many waves either way, 64 rows.
constexpr double kWideBlockCost = 1.3;

template <Gate kGate>
cudaError_t PickPassKeySlices(const ChunkGatedParams& p, int passes, int* slices) {
  *slices = 1;
  if (p.k_dim % (2 * kBK) != 0) return cudaSuccess;
  const auto blocks = [](dim3 grid) { return int64_t{grid.x} * grid.y * grid.z; };
  int64_t narrow = 0, wide = 0;
  cudaError_t err =
      GridWaves(reinterpret_cast<const void*>(StatePassKernel<kGate, 1>), kThreads,
                kStatePassSmemBytes<kGate, 1>, blocks(StatePassGrid<1>(p, passes)), &narrow);
  if (err == cudaSuccess) {
    err = GridWaves(reinterpret_cast<const void*>(StatePassKernel<kGate, 2>), kThreads,
                    kStatePassSmemBytes<kGate, 2>, blocks(StatePassGrid<2>(p, passes)), &wide);
  }
  if (err != cudaSuccess) return err;
  if (wide > 0 && (narrow == 0 || wide * kWideBlockCost < narrow)) *slices = 2;
  return cudaSuccess;
}

// The channel gate's states by the sequential pass where its grid fills at least
// kChannelPassMinWaves of the GPU's block slots; else by each chunk's update and a scan over the
// chunks, which keep every SM busy however few sequences and heads there are. The pass saves the
// updates' round trip through memory (two passes over a [chunks, H, K, V] tensor) but walks each
// sequence's chunks one after another. Measured on the H200 (forward + backward, pass against
// update + scan): 0.777 / 0.853 ms at (4,2048,16,128), 2.953 / 3.212 at (2,16384,16,128), whose
// forward grid of 128 blocks is 0.32 of the 396 slots, and 3.755 / 4.469 at (8,4096,8,256); the
// pass won at every shape measured. Below 0.25 (about 100 blocks there) it is unmeasured, and one
// block walking thousands of chunks would lose, so those keep the scan.
constexpr double kChannelPassMinWaves = 0.25;

// (A template only so that the head gate's translation unit does not build the channel gate's
// pass.)
template <Gate kGate>
cudaError_t UseChannelStatePass(const ChunkGatedParams& p, int passes, bool* use) {
  static_assert(kGate == Gate::kChannel, "the head gate always takes the pass");
  *use = false;
  const dim3 grid = StatePassGrid<1>(p, passes);
  int64_t slots = 0;
  if (cudaError_t err = GridSlots(reinterpret_cast<const void*>(StatePassKernel<kGate, 1>),
                                  kThreads, kStatePassSmemBytes<kGate, 1>, &slots);
      err != cudaSuccess) {
    return err;
  }
  const double blocks = static_cast<double>(grid.x) * grid.y * grid.z;
  *use = slots > 0 && blocks >= kChannelPassMinWaves * static_cast<double>(slots);
  return cudaSuccess;
}

// The per-chunk states; backward: their gradients, and the states again unless the caller kept
// the forward's (kBackward; the forward wrote the final state). By the sequential passes
// (chunk_gated_head_state_pass.cuh, chunk_gated_state_pass.cuh) where by_pass (always for the
// head gate; the channel gate's from decayed operands, which the forward's ChannelScoresKernel
// has written already and the backward's ChunkDecayKernel writes here); else each chunk's
// update, then the scan over the chunks (chunk_gated_states.cuh), the gradients scanned in
// reverse -- that path recomputes the states always.
template <Gate kGate, bool kBackward>
cudaError_t ComputeStates(const ChunkGatedParams& p, const Workspace& w, bool by_pass,
                          cudaStream_t stream) {
  // The backward's forward pass recomputes the states; the forward wrote the final state.
  ChunkGatedParams without_final = p;
  if (kBackward) without_final.final_state = nullptr;
  const int passes = StatePasses(p, kBackward);
  if constexpr (kGate == Gate::kChannel) {
    const dim3 slices = ChunkSliceGrid(p.total_chunks, p.heads, p.k_dim / kBK);
    if (!by_pass) {
      cudaError_t err = LaunchKernel<bf16*, bf16*, float*>(
          ChunkUpdateKernel<kBackward>, slices, UpdateSmemBytes(kBackward, p.v_dim), stream, p,
          w.states, w.d_states, w.decays);
      if (err != cudaSuccess) return err;
      const dim3 scan_grid(ScanBlocks(p), p.heads, p.num_seqs);
      err = LaunchKernel<bf16*, const float*>(StateScanKernel<false>, scan_grid, 0, stream,
                                              without_final, w.states, w.decays);
      if (err != cudaSuccess || !kBackward) return err;
      return LaunchKernel<bf16*, const float*>(StateScanKernel<true>, scan_grid, 0, stream, p,
                                               w.d_states, w.decays);
    }
    if (kBackward) {
      cudaError_t err = LaunchKernel<bf16*, bf16*, float*>(
          ChunkDecayKernel<kGate>, slices, 0, stream, p, w.decayed, w.pass_operand, w.decays);
      if (err != cudaSuccess) return err;
    }
  }
  const PassSet set{passes == 2 || !kBackward ? 0 : 1, passes};
  if constexpr (kGate == Gate::kHead) {
    int slices = 1;
    if (cudaError_t err = PickHeadPassKeySlices(p, passes, &slices); err != cudaSuccess) {
      return err;
    }
    if (slices == 2) return LaunchHeadStatePass<kGate, 2>(without_final, set, w, stream);
    return LaunchHeadStatePass<kGate, 1>(without_final, set, w, stream);
  } else {
    int slices = 1;
    if (cudaError_t err = PickPassKeySlices<kGate>(p, passes, &slices); err != cudaSuccess) {
      return err;
    }
    return slices == 2 ? LaunchStatePass<kGate, 2>(without_final, kBackward, set, w, stream)
                       : LaunchStatePass<kGate, 1>(without_final, kBackward, set, w, stream);
  }
}

// Whether the states go by the sequential passes (head gate: always).
template <Gate kGate>
cudaError_t StatesByPass(const ChunkGatedParams& p, bool backward, bool* by_pass) {
  *by_pass = true;
  if constexpr (kGate == Gate::kChannel) {
    return UseChannelStatePass<kGate>(p, StatePasses(p, backward), by_pass);
  }
  return cudaSuccess;
}

// o (forward) or dv (backward) from the states (forward) or their gradients (backward). The
// channel gate's forward reads the scores and the decayed queries ChannelScoresKernel wrote, its
// backward the forward's scores and the decayed keys ChannelGradQKKernel wrote.
template <Gate kGate, bool kGradV>
cudaError_t LaunchOutput(const ChunkGatedParams& p, const Workspace& w, const bf16* states,
                         cudaStream_t stream) {
  const dim3 slices = ChunkSliceGrid(p.total_chunks, p.heads, p.v_dim / kBK);
  if constexpr (kGate == Gate::kHead) {
    // One block per (chunk, head) where X's tiles fit beside the streamed ones: measured on the
    // H200 at (2,16384,16,128) o 262 -> 239 us and dv 205 -> 196 against HeadOutputKernel's
    // V-slice blocks.
    if (p.k_dim <= kChunkOutputMaxK) {
      return LaunchKernel<const bf16*>(
          HeadChunkOutputKernel<kGate, kGradV>, ChunkSliceGrid(p.total_chunks, p.heads),
          HeadChunkOutputSmemBytes(p.k_dim, p.v_dim, kGradV), stream, p, states);
    }
    return LaunchKernel<const bf16*>(HeadOutputKernel<kGradV>, slices,
                                     HeadOutputSmemBytes(p.k_dim, kGradV), stream, p, states);
  } else {
    return LaunchKernel<const bf16*, const bf16*, const bf16*>(
        ChannelOutputKernel<kGradV>, slices, ChannelOutputSmemBytes(p.k_dim), stream, p, states,
        p.intra_scores, w.decayed);
  }
}

template <Gate kGate>
cudaError_t Forward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, kGate, false); err != cudaSuccess) return err;
  ChunkGatedParams p = params;
  p.num_seqs = NumSeqs(params);
  p.total_chunks = TotalChunks(params);
  Workspace w;
  CarveWorkspace(p, p.workspace, p.total_chunks, kGate, false, w);
  bool by_pass = true;
  if (cudaError_t err = StatesByPass<kGate>(p, false, &by_pass); err != cudaSuccess) return err;
  if constexpr (kGate == Gate::kChannel) {
    // The scores and X first: with the state pass, the kernel also writes the pass's operands.
    cudaError_t err = LaunchKernel<bf16*, bf16*, bf16*, float*>(
        ChannelScoresKernel<kGate>, ChunkSliceGrid(p.total_chunks, p.heads), sizeof(ScoresSmem),
        stream, p, p.intra_scores, w.decayed, by_pass ? w.pass_operand : nullptr, w.decays);
    if (err != cudaSuccess) return err;
  }
  if (cudaError_t err = ComputeStates<kGate, false>(p, w, by_pass, stream); err != cudaSuccess) {
    return err;
  }
  return LaunchOutput<kGate, false>(p, w, w.states, stream);
}

template <Gate kGate>
cudaError_t Backward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, kGate, true); err != cudaSuccess) return err;
  ChunkGatedParams p = params;
  p.num_seqs = NumSeqs(params);
  p.total_chunks = TotalChunks(params);
  Workspace w;
  CarveWorkspace(p, p.workspace, p.total_chunks, kGate, true, w);
  bool by_pass = true;
  if (cudaError_t err = StatesByPass<kGate>(p, true, &by_pass); err != cudaSuccess) return err;
  // The passes read the states the caller kept; the channel gate's scan path recomputes them
  // (into the workspace) even then.
  if (!by_pass) p.chunk_states = nullptr;
  if (p.chunk_states != nullptr) w.states = p.chunk_states;
  if (cudaError_t err = ComputeStates<kGate, true>(p, w, by_pass, stream); err != cudaSuccess) {
    return err;
  }
  if constexpr (kGate == Gate::kHead) {
    const bool gate_grad = p.dg != nullptr && p.g != nullptr;
    if (p.v_dim <= kChunkGradMaxV) {
      // One block per (chunk, head), d_o's and v's tiles resident beside the streamed ones, for
      // dq, dk, dg and dv: measured on the H200 at (1,8192,96,128) 757 -> 704 us against
      // HeadGradQKKernel's K-slice blocks (dq, dk alone); with dv and dg in it too, 895 us
      // against 1025 for it, HeadChunkOutputKernel's dv and HeadGateGradKernel. At V = 256 (one
      // block per SM, where dq and dk alone had been 3% slower forward + backward): 1065 us
      // against 764 + 309 + 11 at (8,4096,8,256).
      auto* const kernel =
          p.v_dim <= 2 * kBK
              ? (gate_grad ? HeadChunkGradQKKernel<true, 2> : HeadChunkGradQKKernel<false, 2>)
              : (gate_grad ? HeadChunkGradQKKernel<true, 4> : HeadChunkGradQKKernel<false, 4>);
      return LaunchKernel<const bf16*, const bf16*>(kernel, ChunkSliceGrid(p.total_chunks, p.heads),
                                                    HeadChunkGradQKSmemBytes(p.v_dim), stream, p,
                                                    w.states, w.d_states);
    }
    // V > 256: so many dv accumulators would spill, so dv by HeadOutputKernel or
    // HeadChunkOutputKernel, dq and dk per K slice, and dg from the slices' sums.
    if (cudaError_t err = LaunchOutput<kGate, true>(p, w, w.d_states, stream);
        err != cudaSuccess) {
      return err;
    }
    cudaError_t err = LaunchKernel<const bf16*, const bf16*, float*>(
        gate_grad ? HeadGradQKKernel<true> : HeadGradQKKernel<false>,
        ChunkSliceGrid(p.total_chunks, p.heads, p.k_dim / kBK), HeadGradQKSmemBytes(p.v_dim),
        stream, p, w.states, w.d_states, w.grad_parts);
    if (err != cudaSuccess || !gate_grad) return err;
    HeadGateGradKernel<kGate>
        <<<ChunkSliceGrid(p.total_chunks, p.heads), kBT, 0, stream>>>(p, w.grad_parts);
    return cudaGetLastError();
  } else {
    // dq, dk, dg first: the kernel also leaves the decayed keys that dv takes, unless
    // ChunkDecayKernel left them for the state pass (not writing them again -- which also let
    // ptxas drop the kernel's 8-byte spill -- took it from 1260 to 1167 us at (8,4096,8,256) on
    // the H200).
    cudaError_t err = LaunchKernel<const bf16*, const bf16*, bf16*>(
        ChannelGradQKKernel<kGate>, ChunkSliceGrid(p.total_chunks, p.heads, p.k_dim / kBK),
        sizeof(ChannelGradSmem), stream, p, w.states, w.d_states, by_pass ? nullptr : w.decayed);
    if (err != cudaSuccess) return err;
    return LaunchOutput<kGate, true>(p, w, w.d_states, stream);
  }
}

}  // namespace flame::kernels::gated_chunk
