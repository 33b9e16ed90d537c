// GPU run of the chunked delta rule: the order of the kernels, shared by chunk_delta_rule and
// chunk_gated_delta_rule (the gated flag is a runtime value). Scalar steps (chunk_delta_steps.h,
// chunk_delta_backward_steps.h) run one thread per unit, the gate's chunk-local scans one warp per
// (chunk, head) (chunk_delta_gate_scans.cuh); the chunk products run as the kernels of
// chunk_delta_tiles.cuh, chunk_delta_state_pass.cuh and the files named after the other kernels
// (chunk_delta_prepare.cuh, the state passes' column and row forms chunk_delta_column_*.cuh and
// chunk_delta_row_*.cuh, chunk_delta_output.cuh, chunk_delta_local_value_grads.cuh,
// chunk_delta_row_terms.cuh (on sm_90a chunk_delta_row_terms_wgmma.cuh),
// chunk_delta_wy_backward.cuh). Included only by
// kernels/delta_rule/chunk_delta_rule.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/common/chunk_grid.cuh"
#include "kernels/common/launch_checks.h"
#include "kernels/common/launch_waves.h"
#include "kernels/common/tensor_map.h"
#include "kernels/delta_rule/chunk_delta_backward_steps.h"
#include "kernels/delta_rule/chunk_delta_column_backward.cuh"
#include "kernels/delta_rule/chunk_delta_column_backward_split.cuh"
#include "kernels/delta_rule/chunk_delta_column_forward.cuh"
#include "kernels/delta_rule/chunk_delta_column_forward_split.cuh"
#include "kernels/delta_rule/chunk_delta_gate_scans.cuh"
#include "kernels/delta_rule/chunk_delta_local_value_grads.cuh"
#include "kernels/delta_rule/chunk_delta_output.cuh"
#include "kernels/delta_rule/chunk_delta_prepare.cuh"
#include "kernels/delta_rule/chunk_delta_prepare_wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_row_backward.cuh"
#include "kernels/delta_rule/chunk_delta_row_forward.cuh"
#include "kernels/delta_rule/chunk_delta_row_terms.cuh"
#include "kernels/delta_rule/chunk_delta_row_terms_wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_state_pass.cuh"
#include "kernels/delta_rule/chunk_delta_steps.h"
#include "kernels/delta_rule/chunk_delta_tiles.cuh"
#include "kernels/delta_rule/chunk_delta_wy_backward.cuh"

namespace flame::kernels::delta_chunk {

constexpr int kStepThreads = 128;

template <typename Step>
__global__ void __launch_bounds__(kStepThreads) StepKernel(Step step) {
  const int64_t unit = int64_t{blockIdx.x} * kStepThreads + threadIdx.x;
  if (unit < step.Units()) step(unit);
}

template <typename Step>
cudaError_t RunStep(const Step& step, cudaStream_t stream) {
  const int64_t units = step.Units();
  if (units == 0) return cudaSuccess;
  const int64_t blocks = (units + kStepThreads - 1) / kStepThreads;
  StepKernel<Step><<<static_cast<unsigned>(blocks), kStepThreads, 0, stream>>>(step);
  return cudaGetLastError();
}

// A gate scan of chunk_delta_gate_scans.cuh: one warp per (chunk, head).
inline cudaError_t RunScan(void (*kernel)(StepBase), const StepBase& b, cudaStream_t stream) {
  const int64_t threads = int64_t{b.p.total_chunks} * b.p.heads * 32;
  if (threads == 0) return cudaSuccess;
  kernel<<<static_cast<unsigned>((threads + kScanThreads - 1) / kScanThreads), kScanThreads, 0,
           stream>>>(b);
  return cudaGetLastError();
}

// A grid of (chunk, head) items, `per_item` blocks each, in the order of
// kernels/common/chunk_grid.cuh (which says why and what it gained).
inline dim3 ChunkHeadsGrid(const ChunkDeltaParams& p, int per_item = 1) {
  return ChunkSliceGrid(p.total_chunks, p.heads, per_item);
}

// Raises the kernel's dynamic shared-memory limit (needed above 48 KB) and launches it.
inline cudaError_t RunTiles(void (*kernel)(StepBase), dim3 grid, size_t smem, const StepBase& base,
                            cudaStream_t stream) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  kernel<<<grid, tiles::kThreads, smem, stream>>>(base);
  return cudaGetLastError();
}

// A variant of a state pass: its kernel, shared memory, value columns and threads per block (its
// grid is (V / cols, H, N)), and whether it forms the chunk-local term itself (local_term: the
// forward's o, else OutputKernel's; the backward's MtdO, else LocalValueGradsKernel's).
struct PassVariant {
  void (*kernel)(StepBase) = nullptr;
  size_t smem = 0;
  int cols = 0;
  int threads = tiles::kThreads;
  bool local_term = false;
};

inline dim3 PassGrid(const ChunkDeltaParams& p, const PassVariant& v) {
  return dim3(p.v_dim / v.cols, p.heads, p.num_seqs);
}

// Whether the current device has the copy engine's tiled copies (sm_90 and later), which the
// state passes and RowTermsWgmmaKernel use there (TileMaps).
inline bool HasTileCopies() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

// Fills b.maps (scratch carved) where the kernels copy by the copy engine (b.tile_copies: always
// where the wgmma kernels run); elsewhere the mma.sync passes copy by cp.async and the maps stay
// empty.
inline cudaError_t BuildTileMaps(StepBase& b) {
  if (!b.tile_copies) return cudaSuccess;
  const ChunkDeltaParams& p = b.p;
  const uint64_t K = p.k_dim, V = p.v_dim, H = p.heads, R = TokenRows(p);
  const uint64_t mats = static_cast<uint64_t>(p.total_chunks) * H;
  // The copies' coordinates are 32-bit: the maps' rows must fit (the states' mats * K are the
  // most, K >= 64).
  if (R > INT32_MAX || mats * K > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  constexpr uint64_t kEl = sizeof(__nv_bfloat16);
  const uint32_t token_box[3] = {kBT, 1, kBT}, tile_box[2] = {kBT, kBT};
  const auto token_map = [&](CUtensorMap* map, const void* base, uint64_t dim) {
    const uint64_t dims[3] = {dim, H, R}, strides[2] = {dim * kEl, H * dim * kEl};
    return base == nullptr ? cudaSuccess
                           : EncodeBf16TileMap(map, base, 3, dims, strides, token_box);
  };
  const auto rows_map = [&](CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows) {
    const uint64_t dims[2] = {cols, rows}, strides[1] = {cols * kEl};
    return base == nullptr ? cudaSuccess : EncodeBf16TileMap(map, base, 2, dims, strides, tile_box);
  };
  cudaError_t err;
  if ((err = token_map(&b.maps.w, b.s.W, K)) != cudaSuccess ||
      (err = token_map(&b.maps.kn, b.s.kn, K)) != cudaSuccess ||
      (err = token_map(&b.maps.qn, b.s.qn, K)) != cudaSuccess ||
      (err = token_map(&b.maps.u, b.s.U, V)) != cudaSuccess ||
      (err = token_map(&b.maps.ut, b.s.Ut, V)) != cudaSuccess ||
      (err = token_map(&b.maps.dy, b.s.dY, V)) != cudaSuccess ||
      (err = rows_map(&b.maps.M, b.s.M, kBT, mats * kBT)) != cudaSuccess ||
      (err = rows_map(&b.maps.dab, b.s.dAb, kBT, mats * kBT)) != cudaSuccess ||
      (err = rows_map(&b.maps.S, b.s.S, V, mats * K)) != cudaSuccess) {
    return err;
  }
  return rows_map(&b.maps.dS, b.s.dS, V, mats * K);
}

inline cudaError_t RunPass(const PassVariant& v, const StepBase& base, cudaStream_t stream) {
  cudaError_t err = cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(v.smem));
  if (err != cudaSuccess) return err;
  v.kernel<<<PassGrid(base.p, v), v.threads, v.smem, stream>>>(base);
  return cudaGetLastError();
}

// Of a pass's variants, the one that runs its blocks in the fewest waves on this device (blocks
// per multiprocessor from the occupancy calculator: registers and shared memory), the earlier on
// a tie; sets the kernels' shared-memory limits. Variants without a kernel are skipped.
// cudaErrorNotSupported where none fits the device's shared memory per block (the backward pass at
// K = 256 on a device with less than the H200's 227 KB, such as the A100's 163 KB).
inline cudaError_t PickVariant(const ChunkDeltaParams& p,
                               std::initializer_list<PassVariant> variants, PassVariant* picked) {
  int64_t best_waves = 0;
  for (const PassVariant& v : variants) {
    if (v.kernel == nullptr || p.v_dim % v.cols != 0) continue;
    const dim3 grid = PassGrid(p, v);
    int64_t waves = 0;
    const cudaError_t err = GridWaves(reinterpret_cast<const void*>(v.kernel), v.threads, v.smem,
                                      int64_t{grid.x} * grid.y * grid.z, &waves);
    if (err != cudaSuccess) return err;
    if (waves > 0 && (best_waves == 0 || waves < best_waves)) best_waves = waves, *picked = v;
  }
  return best_waves > 0 ? cudaSuccess : cudaErrorNotSupported;
}

// Whether this binary and the current device run the sm_90a warpgroup products.
inline bool HasWarpgroupProducts() {
#ifdef FLAME_KERNELS_SM90A
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
         major == 9 && minor == 0;
#else
  return false;
#endif
}

// Whether the sm_90a kernels run: the device has warpgroup products and the caller lets them
// (ChunkDeltaParams::portable_kernels).
inline bool UseWarpgroupProducts(const ChunkDeltaParams& p) {
  return !p.portable_kernels && HasWarpgroupProducts();
}

// Whether the state passes run in column form on warpgroup products (chunk_delta_columns.cuh): on
// the H100/H200, for K <= 128, where the batch has a warpgroup's 64 value columns for at least
// three quarters of the multiprocessors. They hold fewer warps per state slice than the mma.sync
// passes (one per 16 columns, all of K), so they need the width: measured on the H200, the forward
// pass at (1, 8192, 96, 128) 576 -> 419 us, but at (2, 16384, 16, 128) (64 warpgroups) 1.14 -> 1.53
// ms; at K = 256 their tile sets fit one block of one warpgroup per multiprocessor (slower there
// too). With o and MtdO formed in the passes, f+b on the H200 (132 multiprocessors), mma.sync ->
// column form, by warpgroups: 64 at (2, 16384, 16, 128) 3.18 -> 4.10 ms, at (2, 2048, 16, 128)
// 0.49 -> 0.59; 80 at (5, 2048, 8, 128) 0.64 -> 0.64 (gated 0.67 -> 0.70); 96 at (3, 2048, 16,
// 128) 0.713 -> 0.703 (gated 0.752 -> 0.763); 112 at (7, 2048, 8, 128) 0.778 -> 0.754 (gated 0.808
// -> 0.812); 128 at (4, 2048, 16, 128) 0.854 -> 0.815 (gated 0.883 -> 0.875).
// ColumnPassesFit: the shape's part of that test.
inline bool ColumnPassesFit(const ChunkDeltaParams& p) {
  int sms = 0;
  return p.k_dim <= 2 * kBT && MultiprocessorCount(&sms) == cudaSuccess &&
         4 * int64_t{p.v_dim / 64} * p.heads * p.num_seqs >= 3 * int64_t{sms};
}
inline bool UseColumnPasses(const ChunkDeltaParams& p) {
  return UseWarpgroupProducts(p) && ColumnPassesFit(p);
}

// Whether the row-form passes on warpgroup products (chunk_delta_rows.cuh) join the mma.sync
// passes' variants, where the column form does not run: on the H100/H200 for K <= 128 (at K = 256
// a block's double-buffered tiles and the state's copy do not fit). The launcher picks among them
// by waves, the row form first on a tie (PickForwardPass, PickBackwardPass).
inline bool UseRowPasses(const ChunkDeltaParams& p) {
  return UseWarpgroupProducts(p) && !ColumnPassesFit(p) && p.k_dim <= 2 * kBT;
}

// The forward pass's variants: the column pass at 128 or 64 value columns per block (`columns`:
// UseColumnPasses; with `output`, the one that also writes o, for the ungated rule forming M
// itself: ChunkPrepare then writes no M, chunk_delta_columns.cuh's FormChunkMat), or the row-form
// pass (`rows`: UseRowPasses; with `output`, the one that writes o) and the mma.sync pass at 32 or
// 64 (with `output` also the one that writes o, where it runs in as few waves as the one that does
// not: one block per multiprocessor; picked->local_term says which), and with `output` at K =
// 256 on warpgroup products the column pass with single-buffered keys
// (chunk_delta_column_forward_split.cuh), last: taken where it runs in fewer waves than all of
// them (at (8, 4096, 8, 256) on the H200 one against the mma.sync pass's two).
inline cudaError_t PickForwardPass(const StepBase& b, bool output, PassVariant* picked) {
  const ChunkDeltaParams& p = b.p;
  const bool columns = b.column_passes, rows = b.row_passes;
  const int nk = p.k_dim / kBT, K = p.k_dim;
  if (columns) {
    using tiles::StateForwardWgmmaFor, tiles::StateForwardWgmmaSmem;
    if (output && !b.gated) {  // (the pass that forms M)
      return PickVariant(p,
                         {{StateForwardWgmmaFor<2, true, true>(nk),
                           StateForwardWgmmaSmem<true, true>(K, 2), 128, 256, true},
                          {StateForwardWgmmaFor<1, true, true>(nk),
                           StateForwardWgmmaSmem<true, true>(K, 1), 64, 128, true}},
                         picked);
    }
    if (output) {
      return PickVariant(
          p,
          {{StateForwardWgmmaFor<2, true>(nk), StateForwardWgmmaSmem<true>(K, 2), 128, 256, true},
           {StateForwardWgmmaFor<1, true>(nk), StateForwardWgmmaSmem<true>(K, 1), 64, 128, true}},
          picked);
    }
    return PickVariant(
        p,
        {{StateForwardWgmmaFor<2, false>(nk), StateForwardWgmmaSmem<false>(K, 2), 128, 256},
         {StateForwardWgmmaFor<1, false>(nk), StateForwardWgmmaSmem<false>(K, 1), 64, 128}},
        picked);
  }
  using tiles::StateForwardFor, tiles::StateForwardSmem, tiles::kThreads;
  using tiles::StateForwardRowsFor, tiles::StateForwardRowsSmem, tiles::kRowFormCols,
      tiles::kRowForwardThreads;
  PassVariant row_form;
  if (rows) {
    row_form = output ? PassVariant{StateForwardRowsFor<true>(nk), StateForwardRowsSmem<true>(K),
                                    kRowFormCols, kRowForwardThreads, true}
                      : PassVariant{StateForwardRowsFor<false>(nk), StateForwardRowsSmem<false>(K),
                                    kRowFormCols, kRowForwardThreads, false};
  }
  const PassVariant out32{output ? StateForwardFor(nk, 32, true) : nullptr,
                          StateForwardSmem(K, 32, true), 32, kThreads, true};
  const PassVariant out64{output ? StateForwardFor(nk, 64, true) : nullptr,
                          StateForwardSmem(K, 64, true), 64, kThreads, true};
  using tiles::StateForwardWgmmaSplitFor, tiles::StateForwardWgmmaSplitSmem,
      tiles::kSplitColumnCols, tiles::kSplitColumnThreads;
  PassVariant split_columns;
  if (b.warpgroup_products && output && K == 4 * kBT) {
    split_columns = {StateForwardWgmmaSplitFor(b.gated), StateForwardWgmmaSplitSmem(),
                     kSplitColumnCols, kSplitColumnThreads, true};
  }
  return PickVariant(p,
                     {row_form,
                      out32,
                      {StateForwardFor(nk, 32), StateForwardSmem(K, 32), 32},
                      out64,
                      {StateForwardFor(nk, 64), StateForwardSmem(K, 64), 64},
                      split_columns},
                     picked);
}

// The backward pass's: the column pass at 128 or 64 value columns per block (`columns`:
// UseColumnPasses; for the ungated rule the one that forms M itself); or the row-form pass (`rows`:
// UseRowPasses; it forms MtdO itself) and the mma.sync pass with all of a chunk's tiles
// double-buffered, or only the keys (see StateBackwardKernel), each at 32 or 64 value columns;
// before each, where it exists (unsplit for K <= 128, split above), the one that forms MtdO itself
// (picked->local_term), taken where it runs in as few waves; and at K = 256 on warpgroup products
// (`warpgroup`) the column pass with single-buffered queries and W
// (chunk_delta_column_backward_split.cuh; it forms MtdO), last, as the forward's (PickForwardPass).
inline cudaError_t PickBackwardPass(const ChunkDeltaParams& p, bool columns, bool rows,
                                    bool warpgroup, bool gated, PassVariant* picked) {
  const int nk = p.k_dim / kBT, K = p.k_dim;
  if (columns && !gated) {  // (the pass that forms M)
    using tiles::StateBackwardWgmmaFor, tiles::StateBackwardWgmmaSmem;
    return PickVariant(
        p,
        {{StateBackwardWgmmaFor<2, true>(nk), StateBackwardWgmmaSmem<true>(K, 2), 128, 256},
         {StateBackwardWgmmaFor<1, true>(nk), StateBackwardWgmmaSmem<true>(K, 1), 64, 128}},
        picked);
  }
  if (columns) {
    using tiles::StateBackwardWgmmaFor, tiles::StateBackwardWgmmaSmem;
    return PickVariant(p,
                       {{StateBackwardWgmmaFor<2>(nk), StateBackwardWgmmaSmem(K, 2), 128, 256},
                        {StateBackwardWgmmaFor<1>(nk), StateBackwardWgmmaSmem(K, 1), 64, 128}},
                       picked);
  }
  using tiles::StateBackwardFor, tiles::StateBackwardSmem, tiles::kThreads;
  using tiles::StateBackwardRowsFor, tiles::StateBackwardRowsSmem, tiles::kRowFormCols,
      tiles::kRowBackwardThreads;
  PassVariant row_form;  // (a conditional expression in the list below crashed cicc 13.0)
  if (rows) {
    row_form = {StateBackwardRowsFor(nk), StateBackwardRowsSmem(K), kRowFormCols,
                kRowBackwardThreads, true};
  }
  using tiles::StateBackwardWgmmaSplitFor, tiles::StateBackwardWgmmaSplitSmem,
      tiles::kSplitColumnCols, tiles::kSplitColumnThreads;
  PassVariant split_columns;
  if (warpgroup && K == 4 * kBT) {
    split_columns = {StateBackwardWgmmaSplitFor(gated), StateBackwardWgmmaSplitSmem(),
                     kSplitColumnCols, kSplitColumnThreads, true};
  }
  return PickVariant(p,
                     {row_form,
                      {StateBackwardFor(nk, false, 32, true), StateBackwardSmem(K, false, 32, true),
                       32, kThreads, true},
                      {StateBackwardFor(nk, false, 32), StateBackwardSmem(K, false, 32), 32},
                      {StateBackwardFor(nk, true, 32, true), StateBackwardSmem(K, true, 32, true),
                       32, kThreads, true},
                      {StateBackwardFor(nk, true, 32), StateBackwardSmem(K, true, 32), 32},
                      {StateBackwardFor(nk, false, 64, true), StateBackwardSmem(K, false, 64, true),
                       64, kThreads, true},
                      {StateBackwardFor(nk, false, 64), StateBackwardSmem(K, false, 64), 64},
                      {StateBackwardFor(nk, true, 64, true), StateBackwardSmem(K, true, 64, true),
                       64, kThreads, true},
                      {StateBackwardFor(nk, true, 64), StateBackwardSmem(K, true, 64), 64},
                      split_columns},
                     picked);
}

inline cudaError_t Validate(const ChunkDeltaParams& p, bool gated, bool backward) {
  const bool shapes =
      p.heads > 0 && p.k_dim > 0 && p.k_dim <= kMaxK && p.k_dim % kBT == 0 && p.v_dim > 0 &&
      p.v_dim % kBT == 0 && p.seq_len > 0 &&
      (p.cu_seqlens == nullptr
           ? p.batch > 0
           : p.batch == 1 && p.num_seqs > 0 && p.chunk_offsets != nullptr && p.total_chunks > 0);
  const bool gate = !gated || (p.a != nullptr &&
                               (!p.gate_in_kernel || (p.A_log != nullptr && p.dt_bias != nullptr)));
  // The kernels move q, k, v, d_o, o, dq, dk and dv in 4- to 16-byte pieces.
  const bool inputs = p.q && p.k && p.v && p.beta && IsAligned16(p.q) && IsAligned16(p.k) &&
                      IsAligned16(p.v) && Bf16RowsAligned(p.qk_strides) &&
                      Bf16RowsAligned(p.v_strides) && p.workspace && IsAligned(p.workspace, 256) &&
                      IsAligned(p.chunk_states, 256);
  const bool outputs = backward ? p.d_o && IsAligned16(p.d_o) && p.dq && IsAligned16(p.dq) &&
                                      p.dk && IsAligned16(p.dk) && p.dv && IsAligned16(p.dv) &&
                                      p.dbeta && (!gated || p.da)
                                : p.o != nullptr && IsAligned16(p.o);
  return shapes && gate && inputs && outputs ? cudaSuccess : cudaErrorInvalidValue;
}

// Whether the backward's state pass reads MtdO from the scratch: the mma.sync passes but the
// variants that form it themselves (the row form's, and one of the mma.sync pass's;
// PickBackwardPass); true where the pick fails (no device). (The split column pass's gated and
// ungated kernels take the same waves: either stands for both here.)
// p.num_seqs filled in.
inline bool BackwardReadsMtdO(const ChunkDeltaParams& p, bool columns, bool rows) {
  PassVariant pass;
  return !columns &&
         (PickBackwardPass(p, false, rows, UseWarpgroupProducts(p), false, &pass) != cudaSuccess ||
          !pass.local_term);
}

// Bytes of params.workspace the forward (backward = false) or backward needs on the current
// device: the backward's scratch holds MtdO only where its state pass reads it (as
// CarveStepScratch decides for the pass RunBackward picks).
inline size_t WorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  ChunkDeltaParams p = params;
  p.num_seqs = NumSeqs(params);
  return CarveScratch(params, backward,
                      backward && BackwardReadsMtdO(p, UseColumnPasses(p), UseRowPasses(p)),
                      nullptr, nullptr);
}

// Bytes of params.chunk_states.
inline size_t StatesBytes(const ChunkDeltaParams& params) {
  return CarveKeptStates(params, nullptr, nullptr);
}

// The params every kernel sees: sequence and chunk counts filled in, and which form the state
// passes take (the column pass writes o and forms MtdO itself; so may the mma.sync passes, see
// PickForwardPass and PickBackwardPass). The scratch follows (CarveStepScratch).
inline StepBase MakeStepBase(const ChunkDeltaParams& params, bool gated) {
  StepBase base{params, Scratch{}, gated};
  base.p.num_seqs = NumSeqs(params);
  base.p.total_chunks = TotalChunks(params);
  base.warpgroup_products = UseWarpgroupProducts(base.p);
  base.column_passes = base.warpgroup_products && ColumnPassesFit(base.p);  // UseColumnPasses
  base.row_passes = UseRowPasses(base.p);
  base.tile_copies = !base.p.portable_kernels && HasTileCopies();
  return base;
}

// Carves base's scratch from the workspace: the forward's (null backward_pass), or the
// backward's, with MtdO where its state pass reads it (as BackwardReadsMtdO says for a pass that
// was picked), so that the backward picks its pass once. Then encodes the tile maps over that
// scratch, once for all the kernels of the call (BuildTileMaps).
inline cudaError_t CarveStepScratch(StepBase& base, const PassVariant* backward_pass) {
  const bool backward = backward_pass != nullptr;
  const bool mtdo = backward && !base.column_passes && !backward_pass->local_term;
  CarveScratch(base.p, backward, mtdo, base.p.workspace, &base.s);
  return BuildTileMaps(base);
}

// Forward up to the per-chunk states and new values; where the caller kept them and the rest of
// ChunkPrepareKernel's results (`kept`), only the row scalars and the gate's cumsum; with
// `output`, also o.
inline cudaError_t RunForwardKernels(const StepBase& b, bool kept, bool output,
                                     cudaStream_t stream) {
  const ChunkDeltaParams& p = b.p;
  const dim3 chunks(p.total_chunks, p.heads);
  cudaError_t err = cudaSuccess;
  const int64_t row_units = TokenRows(p) * p.heads;
  err = b.s.q_rows == nullptr
            ? RunStep(RowScalars{b}, stream)
            : RunTiles(tiles::PrepareRowsKernel,
                       dim3(static_cast<unsigned>((row_units + tiles::kWarps - 1) / tiles::kWarps)),
                       0, b, stream);
  if (err != cudaSuccess) return err;
  // Ungated, the row scalars wrote G = 0 (StoreRowScalars).
  if (b.gated && (err = RunScan(GateCumsumKernel, b, stream)) != cudaSuccess) return err;
  if (kept) return cudaSuccess;
  err = b.warpgroup_products
            ? RunTiles(b.gated ? tiles::ChunkPrepareWgmmaKernel<true>
                               : tiles::ChunkPrepareWgmmaKernel<false>,
                       ChunkHeadsGrid(p), tiles::ChunkPrepareWgmmaSmem(p.k_dim, p.v_dim), b, stream)
            : RunTiles(tiles::ChunkPrepareKernel, chunks, tiles::ChunkPrepareSmem(p.k_dim, p.v_dim),
                       b, stream);
  if (err != cudaSuccess) return err;
  // The column pass writes o itself (kOutput), and so do the row form's and the mma.sync pass's
  // output variants; after the others, OutputKernel does.
  PassVariant pass;
  if ((err = PickForwardPass(b, output, &pass)) != cudaSuccess ||
      (err = RunPass(pass, b, stream)) != cudaSuccess) {
    return err;
  }
  if (!output || pass.local_term) return cudaSuccess;
  return RunTiles(tiles::OutputKernel, dim3(p.total_chunks * (p.v_dim / kBT), p.heads),
                  tiles::OutputSmem(), b, stream);
}

inline cudaError_t RunForward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, gated, false); err != cudaSuccess) return err;
  StepBase b = MakeStepBase(params, gated);
  if (cudaError_t err = CarveStepScratch(b, nullptr); err != cudaSuccess) return err;
  return RunForwardKernels(b, false, true, stream);
}

// Recomputes the forward scratch (without o and the final state; where the caller kept the
// forward's states, only the row scalars and the gate's cumsum), then the gradients.
inline cudaError_t RunBackward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, gated, true); err != cudaSuccess) return err;
  StepBase b = MakeStepBase(params, gated);
  PassVariant pass;
  cudaError_t err =
      PickBackwardPass(b.p, b.column_passes, b.row_passes, b.warpgroup_products, b.gated, &pass);
  if (err != cudaSuccess || (err = CarveStepScratch(b, &pass)) != cudaSuccess) return err;
  const ChunkDeltaParams& p = b.p;
  const dim3 chunks(p.total_chunks, p.heads);
  const bool columns = b.column_passes;
  StepBase recompute = b;
  recompute.p.final_state = nullptr;
  err = RunForwardKernels(recompute, p.chunk_states != nullptr, false, stream);
  if (err != cudaSuccess) return err;
  // The column pass forms the chunk-local MtdO itself, and so does the mma.sync pass's variant
  // that says so (pass.local_term); the others read it.
  if (!columns && !pass.local_term &&
      (err = RunTiles(tiles::LocalValueGradsKernel, dim3(p.total_chunks * (p.v_dim / kBT), p.heads),
                      tiles::LocalValueGradsSmem(), b, stream)) != cudaSuccess) {
    return err;
  }
  if ((err = RunPass(pass, b, stream)) != cudaSuccess) return err;
  // WYBackward first: RowTerms reads its dY and dAb + dAb^T and finishes dq and dk.
  if ((err = RunTiles(gated ? tiles::WYBackwardKernel<true> : tiles::WYBackwardKernel<false>,
                      ChunkHeadsGrid(p), tiles::WYBackwardSmem(), b, stream)) != cudaSuccess) {
    return err;
  }
  const dim3 row_terms(p.total_chunks * (p.k_dim / kBT), p.heads);
  if (b.warpgroup_products) {
    err = RunTiles(gated ? tiles::RowTermsWgmmaKernel<true> : tiles::RowTermsWgmmaKernel<false>,
                   ChunkHeadsGrid(p, p.k_dim / kBT), tiles::RowTermsWgmmaSmem(), b, stream);
  } else {
    err = RunTiles(gated ? tiles::RowTermsKernel<true> : tiles::RowTermsKernel<false>, row_terms,
                   tiles::RowTermsSmem(), b, stream);
  }
  if (err != cudaSuccess ||
      (err = RunTiles(tiles::RowGradSumsKernel,
                      dim3(p.total_chunks, (p.heads + tiles::kSumHeads - 1) / tiles::kSumHeads), 0,
                      b, stream)) != cudaSuccess) {
    return err;
  }
  if (p.qk_l2norm &&
      (err = RunTiles(tiles::FinishRowsKernel, chunks, 0, b, stream)) != cudaSuccess) {
    return err;
  }
  if (!gated) return cudaSuccess;
  if ((err = RunScan(GateGradsKernel, b, stream)) != cudaSuccess) return err;
  return p.gate_in_kernel ? RunStep(HeadGrads{b}, stream) : cudaSuccess;
}

}  // namespace flame::kernels::delta_chunk
