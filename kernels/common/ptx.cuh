// Inline-PTX wrappers for the tile products of mma_tile.cuh: 32-bit shared-memory addresses,
// shared loads and stores, ldmatrix, the mma.sync shapes we use (sm_80 and later), and a flushing
// exp2.
//
// Why not WMMA: its fragment loads take generic 64-bit pointers, and where the compiler cannot
// prove a tile is in shared memory (a ring slot handed out by a struct, say) every element became
// a generic load with 64-bit address arithmetic -- most of the delta-rule state passes'
// instructions. With these, an operand address is a 32-bit shared address computed once per
// lane, and a k step is a constant offset from it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels::ptx {

__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t LoadShared(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void StoreShared(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ float2 LoadShared2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void StoreShared2(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}
// Four 8 x (4 x 32-bit) matrices; lane l gives the row address of row l % 8 of matrix l / 8 and
// receives, from each matrix, 32-bit element (l / 4, l % 4): the TF32 fragment layout.
__device__ __forceinline__ void LoadMatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LoadMatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The inverse of LoadMatrix4Trans (stmatrix, sm_90): four 8 x 8 bf16 matrices, lane l giving
// the address of row l % 8 of matrix l / 8; r[m] holds the lane's pair of matrix m, rows 2 (l % 4)
// and + 1 of column l / 4 (low half first). So a warp's A-layout fragment of a 16 x 16 block lands
// transposed. Its callers run on sm_90 only; elsewhere it traps.
__device__ __forceinline__ void StoreMatrix4Trans(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
#else
  __trap();
#endif
}
// StoreMatrix4Trans without the transpose: r[m] holds the lane's pair of matrix m, row l / 4,
// columns 2 (l % 4) and + 1, so an A-layout fragment lands as it is.
__device__ __forceinline__ void StoreMatrix4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  __trap();
#endif
}
// 16 bytes from global to shared memory, asynchronously (cp.async.cg: through L2 only; completed
// by __pipeline_commit / __pipeline_wait_prior); src_bytes = 0 writes zeros.
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// c += a b for one m16n8k16 bf16 tile.
__device__ __forceinline__ void MmaM16N8K16Bf16(float* c, const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c += a b for one m16n8k8 TF32 tile (fragments in the PTX ISA's layout).
__device__ __forceinline__ void MmaM16N8K8Tf32(float* c, const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The copy engine's tiled copies (TMA, sm_90): a box of a tensor described by a tensor map
// (kernels/common/tensor_map.h) lands in shared memory, its bytes counted on an mbarrier there. A
// waiter sees the box once the barrier's phase completes: every expected arrival made
// (MbarrierInit's count) and every announced byte landed (MbarrierArriveExpectTx). Callers run
// them on sm_90 only; elsewhere they trap.
__device__ __forceinline__ void MbarrierInit(uint32_t bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}
// One arrival on the barrier's current phase, announcing `bytes` more to land in it.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}
// Until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void MbarrierWait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}
// The box of `map` at coordinates (c0, c1[, c2]) (innermost first) to shared dst, counted on bar.
__device__ __forceinline__ void TmaLoad2D(uint32_t dst, const void* map, int c0, int c1,
                                          uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void TmaLoad3D(uint32_t dst, const void* map, int c0, int c1, int c2,
                                          uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}
// Orders this thread's earlier shared-memory writes before later copy-engine writes to the same
// bytes (a different proxy: a block barrier alone does not order them).
__device__ __forceinline__ void FenceProxyAsync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// Named barrier `id` (1-15; 0 is __syncthreads') of `threads` threads, a multiple of 32: waits
// until that many have arrived or waited. Lets two warpgroups of a block pass data without
// stopping each other: the producer arrives (NamedBarrierArrive), the consumer waits here. Both
// order the thread's earlier shared-memory accesses before those of the threads it meets.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

constexpr float kRcpLn2 = 1.4426950408889634f;  // log2(e): exp(x) = 2^(x kRcpLn2)

// 2^x with results below 2^-126 flushed to zero: one MUFU.EX2, where exp2f adds a range test and
// two predicated multiplies to keep them as denormals. The callers' x are gate-cumsum differences
// (<= 0) inside sums that also hold a term of factor 1 (the diagonal j = i), beside which a term
// of factor 2^-126 is far below fp32 resolution.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flame::kernels::ptx
