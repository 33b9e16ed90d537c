// The block order of the chunk kernels that take one block per (chunk, head[, 64-wide K or V
// slice]): a one-dimensional grid with a chunk's slices next to each other, then the heads, then
// the chunks. Shared by the GLA family (kernels/common/chunk_gated*.cuh) and the delta rule
// (kernels/delta_rule/), so that both read their blocks the same way.
//
// Why this order: the tiles every slice of a chunk reads (dO and V for a K slice, q and k or the
// scores for a V slice) come from L2 for all but the first of its blocks (with the slice in
// blockIdx.z, a chunk's slices ran a whole layer of the grid apart, and each re-read those tiles
// from DRAM); and blocks of neighbouring heads, which run together, share the 32-byte sectors of
// the [tokens, H] fp32 row scalars (gates, beta, their gradients), of which a block reads or
// writes 4 bytes for its head. Measured on the H200 beside (chunks, H) grids in one run (ncu per
// call, at (1, 8192, 96, 128)): the delta rule's ChunkPrepareWgmma 423.5 -> 415.8 us, WYBackward
// 436.3 -> 432.0, RowTermsWgmma 647.9 -> 638.8 (DRAM reads 621.6 -> 610.7, 844.6 -> 815.6, 1940
// -> 1920 MB); chunk_simple_gla's HeadChunkOutput 354.1 -> 343.9, chunk_gla's ChunkDecay 322.8 ->
// 295.0 and ChannelOutput 298.9 -> 285.2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

inline dim3 ChunkSliceGrid(int chunks, int heads, int slices = 1) {
  return dim3(static_cast<unsigned>(int64_t{chunks} * heads * slices));
}
__device__ __forceinline__ int BlockSlice(int slices) { return blockIdx.x % slices; }
__device__ __forceinline__ int BlockHead(int heads, int slices = 1) {
  return blockIdx.x / slices % heads;
}
__device__ __forceinline__ int BlockChunk(int heads, int slices = 1) {
  return blockIdx.x / slices / heads;
}

}  // namespace flame::kernels
