// A block's threads over a fixed number of items, unrolled: for the copy and elementwise loops of
// the tile kernels; and a warp's sum. Device code; header-only.
#pragma once

namespace flame::kernels {

// f(idx) for this thread's share of kCount items, idx = threadIdx.x + i kThreads. (A loop from
// threadIdx.x in steps of kThreads compiles to a generic loop with a remainder, as the compiler
// does not know that threadIdx.x < kThreads: more instructions, and addresses formed per item.)
template <int kThreads, int kCount, typename F>
__device__ __forceinline__ void ForBlockItems(F f) {
  static_assert(kCount % kThreads == 0, "every thread takes the same number of items");
#pragma unroll
  for (int i = 0; i < kCount / kThreads; ++i) f(static_cast<int>(threadIdx.x) + i * kThreads);
}

// The sum of x over the warp's 32 lanes, in every lane.
__device__ inline float WarpSum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

}  // namespace flame::kernels
