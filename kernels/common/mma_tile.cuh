// Tensor-core products of small shared-memory tiles (bf16 or fp32 operands, fp32 results), for
// kernels that stage every operand in shared memory: mma.sync with ldmatrix, on sm_80 and sm_90.
//
// Alignment contract: tile base pointers 16-byte aligned; bf16 leading dimensions a multiple of
// 8 elements, fp32 ones a multiple of 4, so that every row a fragment load reads starts on 16
// bytes. Rows are padded by 16 bytes to spread them over the shared-memory banks (kLdBf16 = 72,
// kLdF32 = 68).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"

namespace flame::kernels::tile {

using bf16 = __nv_bfloat16;

constexpr int kLdBf16 = 72;  // leading dimension of a 64-wide bf16 tile: 64 x 72 x 2 = 9216 B
constexpr int kLdF32 = 68;   // leading dimension of a 64-wide fp32 tile: 64 x 68 x 4 = 17408 B
// A split tile: a 64 x 64 fp32 operand as bf16 hi + lo parts side by side in one tile, row i =
// hi(x_i) in columns [0, 64), lo(x_i) in [64, 128) (StoreSplitBf16Pair; lo_step kSplitLoStep for
// the products), 16 bytes of padding: 64 x 136 x 2 = 17408 B, the size of an fp32 tile, and rows
// an odd number of 16-byte units apart, so that ldmatrix reads it without bank conflicts.
constexpr int kSplitLoStep = 64;
constexpr int kLdSplit = 2 * kSplitLoStep + 8;

// TF32 products (MmaStep, from Tf32AOperand and Tf32BOperand fragments) take fp32 operands whose
// values are already TF32 (10-bit mantissa): the tensor cores read the top 19 bits of each 32-bit
// operand, so a kernel rounds a value once where it stages or produces an operand tile
// (RoundTf32) instead of once per fragment load (each element is loaded by two to four warps).
// An operand left unrounded is truncated: a bias of up to one TF32 ulp, not a fault.
__device__ __forceinline__ float RoundTf32(float x) {
  uint32_t r;  // round to nearest, ties away from zero; the low 13 bits come back zero
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// One butterfly step of the quad transposes (a quad's four lanes trading values so that each
// ends with others' pieces): of the pair (lo, hi), a lane keeps the one that `bit` (its own lane
// bit) selects and sends the other to its partner lane ^ mask, receiving the partner's in `got`.
template <typename T>
__device__ __forceinline__ void QuadTrade(bool bit, T lo, T hi, int mask, T& kept, T& got) {
  kept = bit ? hi : lo;
  got = __shfl_xor_sync(0xffffffffu, bit ? lo : hi, mask);
}

// x = hi + lo to 16 bits of mantissa, each a bf16 pair stored at hi_at and lo_at (4-byte
// aligned): an fp32 operand for bf16 products at twice their work (A hi B + A lo B), which
// ldmatrix reads in either layout where a TF32 operand takes scalar loads and a copy per layout.
__device__ __forceinline__ void StoreSplitBf16Pair(bf16* hi_at, bf16* lo_at, float x0, float x1) {
  const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
  const float2 h = __bfloat1622float2(hi);
  *reinterpret_cast<__nv_bfloat162*>(hi_at) = hi;
  *reinterpret_cast<__nv_bfloat162*>(lo_at) = __floats2bfloat162_rn(x0 - h.x, x1 - h.y);
}

// One warp's 16 x 16 fp32 accumulator as two m16n8 halves (the mma.sync accumulator layout, the
// same for TF32 and bf16 inputs): lane (g, t) = (lane / 4, lane % 4) holds, for half h,
// x[4h..4h+1] = C(g, 8h + 2t .. +1) and x[4h+2..4h+3] = C(g + 8, same columns).
struct WarpAcc16 {
  float x[8];

  __device__ __forceinline__ static int LaneRow() { return threadIdx.x % 32 / 4; }
  __device__ __forceinline__ static int LaneCol() { return threadIdx.x % 4 * 2; }

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = 0.0f;
  }
  __device__ __forceinline__ void Scale(float f) {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] *= f;
  }
  // From / to a 16 x 16 tile of a shared-memory matrix at c (leading dimension ldc, 8-byte
  // aligned rows).
  __device__ __forceinline__ void Load(const float* c, int ldc) {
    const uint32_t base = ptx::SharedAddr(c + LaneRow() * ldc + LaneCol());
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 v = ptx::LoadShared2(base + 4 * (half * 8 * ldc + h * 8));
        x[4 * h + 2 * half] = v.x;
        x[4 * h + 2 * half + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ void Store(float* c, int ldc) const {
    const uint32_t base = ptx::SharedAddr(c + LaneRow() * ldc + LaneCol());
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        ptx::StoreShared2(base + 4 * (half * 8 * ldc + h * 8), x[4 * h + 2 * half],
                          x[4 * h + 2 * half + 1]);
      }
    }
  }
  // C(g + 8 half, 8 h + 2 t .. + 1) as a bf16 pair (rounded to nearest), packed in a word.
  __device__ __forceinline__ uint32_t PackedBf16Pair(int half, int h) const {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x[4 * h + 2 * half], x[4 * h + 2 * half + 1]);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  // To a bf16 shared-memory tile (c 4-byte aligned, ldc even), rounded to nearest.
  __device__ __forceinline__ void StoreBf16(bf16* c, int ldc) const {
    const uint32_t base = ptx::SharedAddr(c + LaneRow() * ldc + LaneCol());
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        ptx::StoreShared(base + 2 * (half * 8 * ldc + h * 8), PackedBf16Pair(half, h));
      }
    }
  }
  // To a bf16 row-major matrix in global memory (c and ldc 8-element aligned), rounded to
  // nearest, in 16-byte stores: the four lanes of a quad, which hold rows g and g + 8 in pairs of
  // columns, trade their packed pairs (a 4 x 4 transpose by two butterfly steps) so that lane t
  // holds row g + 8 (t / 2), columns 8 (t % 2) .. + 7. (Stored by pairs, each warp store
  // instruction wrote 8 rows x 16 bytes: half of every 32-byte sector it touched.)
  __device__ __forceinline__ void StoreBf16Global16B(bf16* c, int64_t ldc) const {
    const int t = threadIdx.x % 4;
    *reinterpret_cast<uint4*>(c + (LaneRow() + 8 * (t >> 1)) * ldc + 8 * (t & 1)) = RowPiece();
  }
  // The same for rows [0, rows) of the tile only.
  __device__ __forceinline__ void StoreBf16Global16B(bf16* c, int64_t ldc, int rows) const {
    const int t = threadIdx.x % 4, row = LaneRow() + 8 * (t >> 1);
    const uint4 piece = RowPiece();  // every lane of the quad trades
    if (row < rows) *reinterpret_cast<uint4*>(c + row * ldc + 8 * (t & 1)) = piece;
  }
  // The lane's 16-byte piece of StoreBf16Global16B.
  __device__ __forceinline__ uint4 RowPiece() const {
    const uint32_t w[4] = {PackedBf16Pair(0, 0), PackedBf16Pair(0, 1), PackedBf16Pair(1, 0),
                           PackedBf16Pair(1, 1)};  // w[2 half + h]
    const int t = threadIdx.x % 4;
    // Step 1 (partner t ^ 1): keep the words whose h is t's bit 0, send the others; afterwards
    // p[2 half + j] = the word (half, h = t & 1) of lane (t & ~1) + j.
    const bool t0 = t & 1, t1 = t & 2;
    uint32_t p[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t keep, got;
      QuadTrade(t0, w[2 * half], w[2 * half + 1], 1, keep, got);
      p[2 * half] = t0 ? got : keep;  // selects, not a lane-dependent index (local memory)
      p[2 * half + 1] = t0 ? keep : got;
    }
    // Step 2 (partner t ^ 2): keep the words whose half is t's bit 1; afterwards q[2 k + j] = the
    // word (half = t >> 1, h = t & 1) of lane 2 k + j, i.e. columns 8 (t & 1) + 2 s .. + 1 of
    // row g + 8 (t >> 1) in q[s].
    uint32_t q[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      uint32_t keep, got;
      QuadTrade(t1, p[j], p[2 + j], 2, keep, got);
      q[j] = t1 ? got : keep;
      q[2 + j] = t1 ? keep : got;
    }
    return make_uint4(q[0], q[1], q[2], q[3]);
  }
};

// Operand fragments of one warp's 16 x 16 x 8 product step, read from shared memory. Each loader
// takes the tile origin once (a per-lane 32-bit address) and then the k offset l of the step.
// kRowMajor: A(i, l) = a[i * lda + l] (read with ldmatrix: 16-byte aligned rows, lda a multiple of
// 4), else A(i, l) = a[l * lda + i] (four 32-bit loads; lda = 8 mod 32 is bank-conflict-free).
template <bool kRowMajor>
struct Tf32AOperand {
  uint32_t base;
  int lda;
  __device__ __forceinline__ Tf32AOperand(const float* a, int lda_) : lda(lda_) {
    const int lane = threadIdx.x % 32;
    base = kRowMajor ? ptx::SharedAddr(a + (lane % 16) * lda + lane / 16 * 4)
                     : ptx::SharedAddr(a + lane % 4 * lda + lane / 4);
  }
  __device__ __forceinline__ void Load(uint32_t (&f)[4], int l) const {
    if (kRowMajor) {
      ptx::LoadMatrix4(f, base + 4 * l);
    } else {
      const uint32_t at = base + 4 * l * lda;
      f[0] = ptx::LoadShared(at);
      f[1] = ptx::LoadShared(at + 4 * 8);
      f[2] = ptx::LoadShared(at + 4 * 4 * lda);
      f[3] = ptx::LoadShared(at + 4 * (4 * lda + 8));
    }
  }
};
// kRowMajor: B(l, j) = b[l * ldb + j] (four 32-bit loads; ldb = 8 mod 32 is conflict-free), else
// B(l, j) = b[j * ldb + l] (ldmatrix). f[2h], f[2h + 1] are the b0, b1 of columns 8h .. 8h + 7.
template <bool kRowMajor>
struct Tf32BOperand {
  uint32_t base;
  int ldb;
  __device__ __forceinline__ Tf32BOperand(const float* b, int ldb_) : ldb(ldb_) {
    const int lane = threadIdx.x % 32;
    base = kRowMajor ? ptx::SharedAddr(b + lane % 4 * ldb + lane / 4)
                     : ptx::SharedAddr(b + (lane % 8 + lane / 16 * 8) * ldb + lane / 8 % 2 * 4);
  }
  __device__ __forceinline__ void Load(uint32_t (&f)[4], int l) const {
    if (kRowMajor) {
      const uint32_t at = base + 4 * l * ldb;
      f[0] = ptx::LoadShared(at);
      f[1] = ptx::LoadShared(at + 4 * 4 * ldb);
      f[2] = ptx::LoadShared(at + 4 * 8);
      f[3] = ptx::LoadShared(at + 4 * (4 * ldb + 8));
    } else {
      ptx::LoadMatrix4(f, base + 4 * l);
    }
  }
};

__device__ __forceinline__ void MmaStep(WarpAcc16& acc, const uint32_t (&a)[4],
                                        const uint32_t (&b)[4]) {
  ptx::MmaM16N8K8Tf32(acc.x, a, b[0], b[1]);
  ptx::MmaM16N8K8Tf32(acc.x + 4, a, b[2], b[3]);
}

// A 64 x 64 fp32 product C = A B accumulated in registers (TF32 or bf16 inputs), for kernels that
// sum several products before storing C once (no shared-memory tile for C, no load and store of C
// per product). Eight warps: warp w owns the 16 x 16 tiles (w / 4, w % 4) and (w / 4 + 2, w % 4)
// of C, which share their B fragments and run as two interleaved MMA chains.
struct Acc64 {
  WarpAcc16 part[2];

  __device__ __forceinline__ static int Row(int i) { return (threadIdx.x / 32 / 4 + 2 * i) * 16; }
  __device__ __forceinline__ static int Col() { return threadIdx.x / 32 % 4 * 16; }

  __device__ __forceinline__ void Zero() {
    part[0].Zero();
    part[1].Zero();
  }
  // C = c[64 x 64] (leading dimension ldc), each warp reading only its own tiles.
  __device__ __forceinline__ void Load(const float* c, int ldc) {
#pragma unroll
    for (int i = 0; i < 2; ++i) part[i].Load(c + Row(i) * ldc + Col(), ldc);
  }
  __device__ __forceinline__ void Scale(float f) {
    part[0].Scale(f);
    part[1].Scale(f);
  }
  // The place in C of element e of part i (WarpAcc16's x[4h + 2 half + b] is its
  // C(g + 8 half, 8h + 2t + b)).
  __device__ __forceinline__ static int ElementRow(int i, int e) {
    return Row(i) + WarpAcc16::LaneRow() + 8 * (e / 2 % 2);
  }
  __device__ __forceinline__ static int ElementCol(int e) {
    return Col() + 8 * (e / 4) + WarpAcc16::LaneCol() + e % 2;
  }
  // x = f(row, col, x) for every element this lane holds.
  template <typename F>
  __device__ __forceinline__ void Transform(F f) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) part[i].x[e] = f(ElementRow(i, e), ElementCol(e), part[i].x[e]);
    }
  }
  // f(offset, C(row, col), C(row, col + 1)) for every pair of adjacent elements this lane holds
  // (col even), offset = row * ld + col: for stores to a row-major matrix in global memory. The
  // offsets are one per-lane base plus multiples of ld, which a loop around the call keeps.
  template <typename F>
  __device__ __forceinline__ void ForEachPairAt(int ld, F f) const {
    const int base = ElementRow(0, 0) * ld + ElementCol(0);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        f(base + (32 * i + 8 * (e / 2 % 2)) * ld + 8 * (e / 4), part[i].x[e], part[i].x[e + 1]);
      }
    }
  }
  // c = C as bf16 (64 x 64 shared tile, ldc even), each warp writing only its own tiles.
  __device__ __forceinline__ void StoreBf16(bf16* c, int ldc) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) part[i].StoreBf16(c + Row(i) * ldc + Col(), ldc);
  }
  // c = C as a split tile (hi at c, lo at c + kSplitLoStep; ldc even), each warp writing only its
  // own tiles.
  __device__ __forceinline__ void StoreSplitBf16(bf16* c, int ldc) const {
    ForEachPairAt(ldc, [&](int at, float x0, float x1) {
      StoreSplitBf16Pair(c + at, c + at + kSplitLoStep, x0, x1);
    });
  }
  // c = C as bf16, a 64 x 64 block of a row-major matrix in global memory (c and ldc 8-element
  // aligned), in 16-byte stores (WarpAcc16::StoreBf16Global16B).
  __device__ __forceinline__ void StoreBf16Global16B(bf16* c, int64_t ldc) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) part[i].StoreBf16Global16B(c + Row(i) * ldc + Col(), ldc);
  }
  // The same for rows [0, rows) of the block only.
  __device__ __forceinline__ void StoreBf16Global16B(bf16* c, int64_t ldc, int rows) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      part[i].StoreBf16Global16B(c + Row(i) * ldc + Col(), ldc, rows - Row(i));
    }
  }
  // c = C, each warp writing only its own tiles; the __syncwarp orders the stores before the
  // warp's next reads of c.
  __device__ __forceinline__ void Store(float* c, int ldc) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) part[i].Store(c + Row(i) * ldc + Col(), ldc);
    __syncwarp();
  }
};

// Elements (r, col) and (r, col + 1) of a bf16 tile of leading dimension kLdBf16 (col even), in one
// 4-byte load.
__device__ inline float2 TilePairAt(const bf16* t, int r, int col) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(t + r * kLdBf16 + col);
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

constexpr int kAcc64ColumnTiles = 4;  // the warps that share a row of an Acc64 (16 columns each)

// parts[r * kAcc64ColumnTiles + w] = the sum over this warp's columns of f(r, col, i, e), the sum
// of elements e and e + 1 (columns col and col + 1, e even) of part i of Acc64-shaped accumulators,
// for every row r the lane holds. The quad's four lanes hold the same four rows: they reduce them
// together by a transposing butterfly (three shuffles; lane t ends with the whole of the quad's
// row t, i = t / 2, half = t % 2) and each lane stores one -- where a reduction per row took
// eight shuffles in four dependent chains. With `add`, the sums go onto the parts already there
// (for sums over several tiles; each part is stored and read by the same lane).
template <typename F>
__device__ inline void StoreRowSumParts(float* parts, F f, bool add = false) {
  float sum[4];  // sum[2 i + half]: row ElementRow(i, 2 half)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = Acc64::ElementRow(i, 2 * half);
      float x = 0.0f;
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {  // the pairs of this row: x[4 n8 + 2 half], + 1
        const int e = 4 * n8 + 2 * half;
        x += f(row, Acc64::ElementCol(e), i, e);
      }
      sum[2 * i + half] = x;
    }
  }
  const int t = threadIdx.x % 4;
  const bool t0 = t & 1, t1 = t & 2;
  // Step 1 (partner t ^ 1): keep the sums whose index has t's bit 0, add the partner's.
  float a[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    float keep, got;
    QuadTrade(t0, sum[2 * k], sum[2 * k + 1], 1, keep, got);
    a[k] = keep + got;
  }
  // Step 2 (partner t ^ 2): keep a[t's bit 1]; the quad's total of sum[t].
  float keep, got;
  QuadTrade(t1, a[0], a[1], 2, keep, got);
  const float total = keep + got;
  const int row = Acc64::ElementRow(t / 2, 2 * (t % 2));
  float& part = parts[row * kAcc64ColumnTiles + Acc64::Col() / 16];
  part = add ? part + total : total;
}

// Row r's sum from its parts, always in the same order.
__device__ inline float RowSum(const float* parts, int r) {
  const float* p = parts + r * kAcc64ColumnTiles;
  return ((p[0] + p[1]) + p[2]) + p[3];
}

// The column sums' counterpart of StoreRowSumParts, for sums the lane has formed over its own
// elements: col[j] is the lane's sum for column ElementCol(j / 2 * 4 + j % 2) of Acc64-shaped
// values. The eight lanes g of a quad position hold the same columns: a butterfly over them (three
// shuffles a column), then lanes 0-3 store parts[h * 64 + c] for the warp's row half h = w / 4
// (warps w and w + 4 hold the same columns), so column c sums to parts[c] + parts[64 + c].
__device__ inline void StoreColumnSumParts(float* parts, float (&col)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    for (int off = 4; off < 32; off *= 2) col[j] += __shfl_xor_sync(0xffffffffu, col[j], off);
  }
  if (threadIdx.x % 32 < 4) {
    float* part = parts + threadIdx.x / 32 / kAcc64ColumnTiles * 64;
#pragma unroll
    for (int j = 0; j < 4; ++j) part[Acc64::ElementCol(j / 2 * 4 + j % 2)] = col[j];
  }
}

// The k steps of an Acc64 product for each of a warp's two C tiles. FullK: all of [0, kd).
// PartK: [begin[i], end[i]) for part i (multiples of 16; begin == end: the part keeps its value),
// for triangular operands whose zero 16-row blocks a product leaves out: the k loop runs over the
// union of the ranges and skips, per part, the steps outside its own (uniform per warp).
struct FullK {
  int kd;
  __device__ __forceinline__ int Begin() const { return 0; }
  __device__ __forceinline__ int End() const { return kd; }
  __device__ __forceinline__ bool Has(int, int) const { return true; }
};
struct PartK {
  int begin[2], end[2];
  __device__ __forceinline__ int Begin() const {
    return min(begin[0] < end[0] ? begin[0] : end[1], begin[1] < end[1] ? begin[1] : end[0]);
  }
  __device__ __forceinline__ int End() const { return max(end[0], end[1]); }
  __device__ __forceinline__ bool Has(int i, int l) const { return l >= begin[i] && l < end[i]; }
};

// Operand fragments of a warp's m16n8k16 bf16 product step (two n8 halves), read with ldmatrix
// (.trans for the layouts stored the other way): every layout reads 8 x 16-byte rows, so rows
// must be 16-byte aligned (leading dimension a multiple of 8; kLdBf16 spreads them over the banks).
// kRowMajor: A(i, l) = a[i * lda + l], else a[l * lda + i]. f as the PTX ISA's a0..a3.
template <bool kRowMajor>
struct Bf16AOperand {
  uint32_t base;
  int lda;
  Bf16AOperand() = default;
  __device__ __forceinline__ Bf16AOperand(const bf16* a, int lda_) : lda(lda_) {
    const int lane = threadIdx.x % 32;
    base = kRowMajor ? ptx::SharedAddr(a + (lane % 16) * lda + lane / 16 * 8)
                     : ptx::SharedAddr(a + (lane % 8 + lane / 16 * 8) * lda + lane / 8 % 2 * 8);
  }
  __device__ __forceinline__ void Load(uint32_t (&f)[4], int l) const {
    if (kRowMajor) {
      ptx::LoadMatrix4(f, base + 2 * l);
    } else {
      ptx::LoadMatrix4Trans(f, base + 2 * l * lda);
    }
  }
};
// kRowMajor: B(l, j) = b[l * ldb + j], else b[j * ldb + l]. f[2h], f[2h + 1] are the b0, b1 of
// columns 8h .. 8h + 7.
template <bool kRowMajor>
struct Bf16BOperand {
  uint32_t base;
  int ldb;
  __device__ __forceinline__ Bf16BOperand(const bf16* b, int ldb_) : ldb(ldb_) {
    const int lane = threadIdx.x % 32;
    base = kRowMajor ? ptx::SharedAddr(b + (lane % 16) * ldb + lane / 16 * 8)
                     : ptx::SharedAddr(b + (lane % 8 + lane / 16 * 8) * ldb + lane / 8 % 2 * 8);
  }
  __device__ __forceinline__ void Load(uint32_t (&f)[4], int l) const {
    if (kRowMajor) {
      ptx::LoadMatrix4Trans(f, base + 2 * l * ldb);
    } else {
      ptx::LoadMatrix4(f, base + 2 * l);
    }
  }
};

// MmaBf16Acc64's b_fragment that leaves the fragment as loaded.
struct KeepBFragment {
  __device__ __forceinline__ void operator()(uint32_t (&)[4], int) const {}
};

// acc[n] += A_n[64 x kd] B[kd x 64] from bf16 tiles, C in registers (Acc64), for kN left operands
// A_n = a + n * a_step (e.g. the 64-row slices of a taller A) that share B: each B fragment is
// loaded once per k step and passed through b_fragment(fb, l) (l the k offset, fb as
// Bf16BOperand loads it), e.g. to scale B's rows without a pass over the tile. With kSum, every
// product goes to acc[0]: acc[0] += (sum_n A_n) B, for an operand held as the bf16 tiles of its
// parts (StoreSplitBf16Pair's hi and lo). Layout flags as Mma; kd a multiple of 16 (k: FullK or
// PartK).
template <bool kARowMajor, bool kBRowMajor, int kN, typename BFragment, bool kSum = false,
          typename KSteps = FullK>
__device__ __forceinline__ void MmaBf16Acc64Steps(Acc64* acc, KSteps k, const bf16* a, int lda,
                                                  int a_step, const bf16* b, int ldb,
                                                  BFragment b_fragment) {
  const int col = Acc64::Col();
  const Bf16BOperand<kBRowMajor> bo(kBRowMajor ? b + col : b + col * ldb, ldb);
  Bf16AOperand<kARowMajor> a0[kN], a1[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const bf16* an = a + n * a_step;
    a0[n] = {kARowMajor ? an + Acc64::Row(0) * lda : an + Acc64::Row(0), lda};
    a1[n] = {kARowMajor ? an + Acc64::Row(1) * lda : an + Acc64::Row(1), lda};
  }
#pragma unroll 4
  for (int l = k.Begin(); l < k.End(); l += 16) {
    uint32_t fb[4];
    bo.Load(fb, l);
    b_fragment(fb, l);
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      uint32_t fa0[4], fa1[4];
      if (k.Has(0, l)) a0[n].Load(fa0, l);
      if (k.Has(1, l)) a1[n].Load(fa1, l);
      Acc64& c = acc[kSum ? 0 : n];
      if (k.Has(0, l)) {
        ptx::MmaM16N8K16Bf16(c.part[0].x, fa0, fb[0], fb[1]);
        ptx::MmaM16N8K16Bf16(c.part[0].x + 4, fa0, fb[2], fb[3]);
      }
      if (k.Has(1, l)) {
        ptx::MmaM16N8K16Bf16(c.part[1].x, fa1, fb[0], fb[1]);
        ptx::MmaM16N8K16Bf16(c.part[1].x + 4, fa1, fb[2], fb[3]);
      }
    }
  }
}

template <bool kARowMajor, bool kBRowMajor, int kN, typename BFragment, bool kSum = false>
__device__ __forceinline__ void MmaBf16Acc64(Acc64* acc, int kd, const bf16* a, int lda, int a_step,
                                             const bf16* b, int ldb, BFragment b_fragment) {
  MmaBf16Acc64Steps<kARowMajor, kBRowMajor, kN, BFragment, kSum>(acc, FullK{kd}, a, lda, a_step, b,
                                                                 ldb, b_fragment);
}

// acc += A[64 x kd] B[kd x 64] from bf16 tiles, C in registers (Acc64). Layout flags as Mma; kd
// a multiple of 16 (or k: PartK).
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaBf16Acc64(Acc64& acc, int kd, const bf16* a, int lda,
                                             const bf16* b, int ldb) {
  MmaBf16Acc64Steps<kARowMajor, kBRowMajor, 1>(&acc, FullK{kd}, a, lda, 0, b, ldb, KeepBFragment{});
}
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaBf16Acc64(Acc64& acc, const PartK& k, const bf16* a, int lda,
                                             const bf16* b, int ldb) {
  MmaBf16Acc64Steps<kARowMajor, kBRowMajor, 1>(&acc, k, a, lda, 0, b, ldb, KeepBFragment{});
}

// acc += (A_hi + A_lo)[64 x kd] B[kd x 64] from bf16 tiles, A_lo = a_hi + lo_step: an fp32 left
// operand as StoreSplitBf16Pair's two bf16 tiles (16 bits of mantissa, against TF32's 11), at
// twice a bf16 product's tensor work but with ldmatrix loads in either layout, where a TF32
// operand takes scalar loads. Layout flags as Mma; kd a multiple of 16 (or k: PartK).
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaSplitBf16Acc64(Acc64& acc, int kd, const bf16* a_hi, int lda,
                                                  int lo_step, const bf16* b, int ldb) {
  MmaBf16Acc64<kARowMajor, kBRowMajor, 2, KeepBFragment, true>(&acc, kd, a_hi, lda, lo_step, b, ldb,
                                                               KeepBFragment{});
}
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaSplitBf16Acc64(Acc64& acc, const PartK& k, const bf16* a_hi,
                                                  int lda, int lo_step, const bf16* b, int ldb) {
  MmaBf16Acc64Steps<kARowMajor, kBRowMajor, 2, KeepBFragment, true>(&acc, k, a_hi, lda, lo_step, b,
                                                                    ldb, KeepBFragment{});
}

// acc += A B over one 16-deep step of a 16 x 16 warp tile, from A's fragment fa (as
// Bf16AOperand loads it) and B's fb (Bf16BOperand: the tile's two 8-column halves).
__device__ __forceinline__ void MmaWarp16Step(WarpAcc16& acc, const uint32_t (&fa)[4],
                                              const uint32_t (&fb)[4]) {
  ptx::MmaM16N8K16Bf16(acc.x, fa, fb[0], fb[1]);
  ptx::MmaM16N8K16Bf16(acc.x + 4, fa, fb[2], fb[3]);
}

// acc += A[16 x kd] B[kd x 16] by one warp from bf16 tiles, with a pointing at A(0, 0) and b at
// B(0, 0) (layout flags as Mma; kd a multiple of 16).
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaBf16Warp16(WarpAcc16& acc, int kd, const bf16* a, int lda,
                                              const bf16* b, int ldb) {
  const Bf16AOperand<kARowMajor> ao(a, lda);
  const Bf16BOperand<kBRowMajor> bo(b, ldb);
  for (int l = 0; l < kd; l += 16) {
    uint32_t fa[4], fb[4];
    ao.Load(fa, l);
    bo.Load(fb, l);
    ptx::MmaM16N8K16Bf16(acc.x, fa, fb[0], fb[1]);
    ptx::MmaM16N8K16Bf16(acc.x + 4, fa, fb[2], fb[3]);
  }
}

// This warp's part of <a, b> = sum_ij a_ij b_ij over two 64 x 64 bf16 tiles (leading dimension
// ld), for a block of eight warps, by tensor cores: <a, b> is the trace of A B^T, the sum of the
// traces of its 16 x 16 diagonal blocks. Warp w takes diagonal block w % 4 over columns
// [32 (w / 4), + 32): one 16 x 16 x 32 product, of which lane (g, t) keeps its diagonal
// elements -- C(g + 8 half, 8 h + 2t + b) lies on the diagonal where half = h and g = 2t + b.
// The block's parts summed give <a, b>. (Summed elementwise from 16-byte loads it took about
// four times the instructions, most of them the bf16 pairs' unpacking shifts and masks.)
__device__ inline float TileDotPart(const bf16* a, const bf16* b, int ld) {
  const int warp = threadIdx.x / 32, block = warp % 4 * 16, col0 = warp / 4 * 32;
  WarpAcc16 c;
  c.Zero();
  MmaBf16Warp16<true, false>(c, 32, a + block * ld + col0, ld, b + block * ld + col0, ld);
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  if (g / 2 != t) return 0.0f;
  return (g & 1) ? c.x[1] + c.x[7] : c.x[0] + c.x[6];
}

// C[m x n] = (accumulate ? C : 0) + A[m x kd] * B[kd x n] from bf16 tiles, C fp32 in shared
// memory; m, n, kd multiples of 16. kARowMajor: A(i, l) = a[i * lda + l], else a[l * lda + i]
// (A is the transpose of a stored tile); kBRowMajor: B(l, j) = b[l * ldb + j], else b[j * ldb + l].
// The warps of the block share the 16 x 16 output tiles; the caller synchronises around the call.
template <bool kARowMajor, bool kBRowMajor, int kWarps>
__device__ __forceinline__ void Mma(int m, int n, int kd, const bf16* a, int lda, const bf16* b,
                                    int ldb, float* c, int ldc, bool accumulate) {
  const int warp = threadIdx.x / 32;
  const int tiles_n = n / 16;
  for (int tile = warp; tile < (m / 16) * tiles_n; tile += kWarps) {
    const int tm = tile / tiles_n, tn = tile % tiles_n;
    float* pc = c + tm * 16 * ldc + tn * 16;
    WarpAcc16 acc;  // the accumulator layout is the same for every input type
    if (accumulate) {
      acc.Load(pc, ldc);
    } else {
      acc.Zero();
    }
    const Bf16AOperand<kARowMajor> ao(kARowMajor ? a + tm * 16 * lda : a + tm * 16, lda);
    const Bf16BOperand<kBRowMajor> bo(kBRowMajor ? b + tn * 16 : b + tn * 16 * ldb, ldb);
#pragma unroll 4
    for (int l = 0; l < kd; l += 16) {
      uint32_t fa[4], fb[4];
      ao.Load(fa, l);
      bo.Load(fb, l);
      ptx::MmaM16N8K16Bf16(acc.x, fa, fb[0], fb[1]);
      ptx::MmaM16N8K16Bf16(acc.x + 4, fa, fb[2], fb[3]);
    }
    acc.Store(pc, ldc);
  }
}

}  // namespace flame::kernels::tile
