// Warpgroup tensor-core products (wgmma, sm_90a only) with the left operand in registers (or, for
// MmaSharedA64, in shared memory): the four warps of a warpgroup multiply a 64-row A, each warp
// holding its 16 rows as mma.sync's m16n8k16 A fragment (a0..a3), by an N-column B that the
// tensor cores read straight from shared memory, into fp32 accumulators laid out as mma.sync's
// m16n8 C tiles one after another: for warp w, d[4 j + 2 h + b] is row 16 w + lane / 4 + 8 h,
// column 8 j + 2 (lane % 4) + b. So a warp's accumulators of one product are its A fragments of
// the next (rounded to bf16), and B is read once per warpgroup instead of once per warp
// (mma.sync: ldmatrix per warp).
//
// B is bf16 in the 128-byte swizzle layout (DescriptorSwizzle128): K-major B (stored N x K: each
// 128-byte row holds 64 consecutive k of one column n) or N-major (kTransB: each row holds 64
// consecutive n of one k). (The no-swizzle core-matrix layout, which the column state passes used
// before the copy engine filled their tiles, needs 16-byte pieces scattered 128 bytes apart: a
// copy per piece.)
//
// Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the kernels that use these are
// never launched (FLAME_KERNELS_SM90A on the host, set by kernels/CMakeLists.txt, and a compute
// capability 9.0 device) and the wrappers are empty.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLAME_WGMMA_DEVICE 1
#endif

namespace flame::kernels::wgmma {

// The descriptor of a B operand at shared address addr (1024-byte aligned) in the 128-byte swizzle
// layout: rows of 64 bf16 (128 bytes), 16-byte piece c of row r at r * 128 + 16 (c ^ (r % 8)),
// for both K-major (rows along N: a k step of 16 adds 32 bytes) and N-major B (rows along K: a k
// step adds 2048 bytes); 1024 bytes between groups of 8 rows (the stride offset). An N-major B
// wider than 64 is 64-column tiles `atom_stride` bytes apart (the leading offset, unused at N =
// 64 and for K-major B).
__device__ __forceinline__ uint64_t DescriptorSwizzle128(uint32_t addr, uint32_t atom_stride = 16) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | uint64_t{(atom_stride & 0x3FFFF) >> 4} << 16 |
         uint64_t{1024 >> 4} << 32 | uint64_t{1} << 62;
}

// Orders this thread's earlier writes of A fragments and accumulators before the products that
// read them.
__device__ __forceinline__ void Fence() {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void Commit() {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending committed groups of products are still running (0: all done,
// their accumulators readable and their A registers and B shared memory free).
template <int kPending>
__device__ __forceinline__ void Wait() {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Makes this thread's shared-memory writes (plain stores and cp.async) visible to the tensor
// cores' operand reads, which go through the async proxy; a barrier must follow before the
// products.
__device__ __forceinline__ void FenceSharedForProducts() {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// A 64 x 64 product's accumulators in the asm of MmaRegA and MmaSharedA64: the instruction's
// register list and the 32 read-write operands it names.
#define FLAME_WGMMA_D32_REGS                                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define FLAME_WGMMA_D32_OPERANDS(d)                                                               \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d += (kNegA ? -A : A) B for one 64 x N x 16 step: a this warp's A fragment, b B's descriptor;
// kTransB: B is N-major. N = 64 or 128 (d holds N / 2 floats).
template <int N>
struct RegAStep;  // one instantiation per N, below
template <int N, bool kNegA, bool kTransB>
__device__ __forceinline__ void MmaRegA(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  RegAStep<N>::template Run<kNegA, kTransB>(d, a, b);
}

#define FLAME_WGMMA_D16_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define FLAME_WGMMA_D16_OPERANDS(d)                                                               \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])

template <>
struct RegAStep<64> {
  template <bool kNegA, bool kTransB>
  __device__ __forceinline__ static void Run(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
#ifdef FLAME_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLAME_WGMMA_D32_REGS
        "{%32, %33, %34, %35}, %36, p, %37, 1, %38;\n}\n"
        : FLAME_WGMMA_D32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kNegA ? -1 : 1),
          "n"(int{kTransB}));
#endif
  }
};

template <>
struct RegAStep<128> {
  template <bool kNegA, bool kTransB>
  __device__ __forceinline__ static void Run(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
#ifdef FLAME_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
        "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
        "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
        "%62, %63}, "
        "{%64, %65, %66, %67}, %68, p, %69, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kNegA ? -1 : 1),
          "n"(int{kTransB}));
#endif
  }
};

// d += A B for one 64 x 64 x 16 step with A, too, read from shared memory: a is its descriptor
// (DescriptorSwizzle128 of a K-major A, stored M x K: each 128-byte row holds 64 consecutive k of
// one row m; a k step of 16 adds 32 bytes; or with kTransA an M-major A, stored K x M as N-major
// B is: a k step adds 2048 bytes, so that a tile X read this way multiplies as X^T), b as
// MmaRegA's. No registers hold A, so a warpgroup can issue it beside register-A products that keep
// their fragments.
template <bool kTransB, bool kTransA = false>
__device__ __forceinline__ void MmaSharedA64(float (&d)[32], uint64_t a, uint64_t b) {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLAME_WGMMA_D32_REGS
      "%32, %33, p, 1, 1, %34, %35;\n}\n"
      : FLAME_WGMMA_D32_OPERANDS(d)
      : "l"(a), "l"(b), "n"(int{kTransA}), "n"(int{kTransB}));
#endif
}

// The row-form state passes' 64 x 32 x 16 steps (chunk_delta_rows.cuh), B K-major: d = (kAccumulate
// ? d : 0) + (kNegA ? -A : A) B, with A a warp's fragment (MmaRegA32) or K-major in shared memory
// (MmaSharedA32; descriptors as MmaSharedA64's). A product's first step without kAccumulate needs
// no zeroed accumulators: zeros set after wgmma::Fence made ptxas wait for the products before
// (C7517).
template <bool kNegA, bool kAccumulate = true>
__device__ __forceinline__ void MmaRegA32(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FLAME_WGMMA_D16_REGS
      "{%16, %17, %18, %19}, %20, p, %22, 1, 0;\n}\n"
      : FLAME_WGMMA_D16_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(int{kAccumulate}),
        "n"(kNegA ? -1 : 1));
#endif
}
template <bool kNegA, bool kAccumulate = true>
__device__ __forceinline__ void MmaSharedA32(float (&d)[16], uint64_t a, uint64_t b) {
#ifdef FLAME_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " FLAME_WGMMA_D16_REGS
      "%16, %17, p, %19, 1, 0, 0;\n}\n"
      : FLAME_WGMMA_D16_OPERANDS(d)
      : "l"(a), "l"(b), "n"(int{kAccumulate}), "n"(kNegA ? -1 : 1));
#endif
}

#undef FLAME_WGMMA_D16_REGS
#undef FLAME_WGMMA_D16_OPERANDS
#undef FLAME_WGMMA_D32_REGS
#undef FLAME_WGMMA_D32_OPERANDS

}  // namespace flame::kernels::wgmma
