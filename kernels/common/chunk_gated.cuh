// Chunked gated linear attention on tensor cores: the device code shared by chunk_simple_gla
// (per-head gate) and chunk_gla (per-channel gate). Only kernels/simple_gla/*.cu and
// kernels/gla/*.cu include this file; each instantiates one gate kind.
//
// Algorithm (fla's chunk form, chunk BT = 64; see ../shared/reference/fla.md §2.3-2.4):
//   G     chunk-local inclusive cumsum of the natural-log gate, times 1/ln2 (fp32); decays are
//         exp2 of differences, always arranged so that the exponent is <= 0.
//   h_c   state entering chunk c (K x V):  h_{c+1} = diag(2^G_last) h_c + (K * 2^(G_last-G))^T V
//   o     scale * [(Q * 2^G) h_c + tril(A) V],  A_ij = sum_k q_ik k_jk 2^(G_ik - G_jk)
//   dh_c  gradient of the state leaving chunk c: dh_{c-1} = diag(2^G_last) dh_c + scale (Q*2^G)^T dO
//   dg    reverse cumsum over the sequence of (q dq - k dk), rewritten per chunk so that it
//         needs no pass over the sequence (see GradQKKernel).
// States are stored per chunk in bf16 (fla does the same in its forward); the running state and
// every accumulator are fp32.
// For the per-channel gate the off-diagonal 16x16 sub-blocks of A (and of the dq/dk products)
// are re-referenced to a row n of the sub-chunk, (q 2^(G-G_n)) (k 2^(G_n-G))^T, so that neither
// factor can overflow; the diagonal sub-blocks are computed elementwise in fp32.
//
// Work split: every kernel runs 256 threads on 64 x 64 tiles, looping over K and V in 64-wide
// slices (K, V any multiple of 64; only ChunkOutputKernel's shared memory grows with K).
//   StatePassKernel      grid (K/64 * V/64, H, N), sequential over the chunks of a sequence
//                        (forward: states; backward: reverse, state gradients)
//   ChunkOutputKernel    grid (chunks, H): o (forward) or dv (backward)
//   GradQKKernel         grid (chunks, H): dq, dk and dg
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_seqs.h"
#include "kernels/common/launch_checks.h"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

using tile::bf16;
using tile::kLdBf16;
using tile::kLdF32;
using tile::Mma;

constexpr int kBT = kGatedChunkSize;  // chunk length (rows)
constexpr int kBK = 64;               // K and V slice width
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kRcpLn2 = 1.4426950408889634f;
static_assert(kBT == 64 && kBK == 64 && kThreads == 256, "tile loops assume 64 x 64 tiles, 256 threads");

enum class Gate {
  kHead,     // g [B,T,H] or g_gamma [H]: one decay per head and token
  kChannel,  // g [B,T,H,K]: one decay per key channel
};

// ----------------------------------------------------------------------------------------------
// Indexing

using Seq = ChunkSeq;

struct Chunk {
  int seq, batch, t0, rows, index, count, global;
};

__device__ inline Chunk MakeChunk(int seq_index, const Seq& s, int index) {
  return {seq_index, s.batch, s.bos + index * kBT, min(kBT, s.len - index * kBT),
          index,     s.num_chunks, s.first_chunk + index};
}

__device__ inline Chunk LocateChunk(const ChunkGatedParams& p, int global) {
  const int n = SeqOfChunk<kBT>(p, global);
  const Seq s = LocateSeq<kBT>(p, n);
  return MakeChunk(n, s, global - s.first_chunk);
}

template <typename T>
__device__ inline T* RowPtr(T* base, const TensorStrides& s, int batch, int t, int h) {
  return base + batch * s.batch + int64_t{t} * s.token + int64_t{h} * s.head;
}

// Offset of element (row, col) of head h's K x V state block `block` (a chunk or a sequence).
__device__ inline int64_t StateOffset(const ChunkGatedParams& p, int block, int h, int row,
                                      int col) {
  return ((int64_t{block} * p.heads + h) * p.k_dim + row) * p.v_dim + col;
}

__device__ inline float ToFloat(float x) { return x; }
__device__ inline float ToFloat(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ inline T FromFloat(float x);
template <>
__device__ inline float FromFloat<float>(float x) { return x; }
template <>
__device__ inline bf16 FromFloat<bf16>(float x) { return __float2bfloat16(x); }

// ----------------------------------------------------------------------------------------------
// Tile loads

// dst[r][c] = row t0 + r, columns [col0, col0 + 64) of a [B,T,H,D] bf16 tensor; rows past `rows`
// are zero. 16-byte loads: the launcher checks strides and pointers for 8-element alignment.
__device__ inline void LoadRows(bf16* dst, const bf16* base, const TensorStrides& s,
                                const Chunk& c, int h, int col0) {
  for (int idx = threadIdx.x; idx < kBT * 8; idx += kThreads) {
    const int r = idx / 8, c8 = idx % 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < c.rows) {
      val = *reinterpret_cast<const uint4*>(RowPtr(base, s, c.batch, c.t0 + r, h) + col0 + c8 * 8);
    }
    *reinterpret_cast<uint4*>(dst + r * kLdBf16 + c8 * 8) = val;
  }
}

// Gate tiles load in two steps, so that the sequential state passes can fetch the next chunk's
// gate into registers while they work on the current one.
//   channel gate: four threads per column, 16 rows each; head gate: one thread per row.
template <Gate kGate>
struct GateRegs {
  float x[kGate == Gate::kChannel ? 16 : 1];
};

template <Gate kGate>
__device__ inline void FetchGate(GateRegs<kGate>& regs, const ChunkGatedParams& p, const Chunk& c,
                                 int h, int col0) {
  if constexpr (kGate == Gate::kChannel) {
    const int col = threadIdx.x % 64, part = threadIdx.x / 64;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int r = part * 16 + i;
      regs.x[i] = r < c.rows ? RowPtr(p.g, p.g_strides, c.batch, c.t0 + r, h)[col0 + col] : 0.0f;
    }
  } else {
    const int r = threadIdx.x;
    regs.x[0] = 0.0f;
    if (r < c.rows) {
      regs.x[0] = p.g_gamma != nullptr ? p.g_gamma[h] : *RowPtr(p.g, p.g_strides, c.batch, c.t0 + r, h);
    }
  }
}

// G = log2-scaled inclusive cumsum over the chunk's rows (per column for the channel gate);
// padded rows add 0, so row 63 holds the last valid row's value. Ends synchronised.
template <Gate kGate>
__device__ inline void CommitGate(float* G, const GateRegs<kGate>& regs) {
  if constexpr (kGate == Gate::kChannel) {
    const int col = threadIdx.x % 64, part = threadIdx.x / 64;
    float vals[16];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      acc += regs.x[i];
      vals[i] = acc;
    }
    G[(part * 16 + 15) * kLdF32 + col] = acc;  // this part's total
    __syncthreads();
    float base = 0.0f;
    for (int q = 0; q < part; ++q) base += G[(q * 16 + 15) * kLdF32 + col];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 16; ++i) G[(part * 16 + i) * kLdF32 + col] = (base + vals[i]) * kRcpLn2;
    __syncthreads();
  } else {
    const int r = threadIdx.x;
    float x = regs.x[0];
    if (r < kBT) {
      for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, x, off);
        if (r % 32 >= off) x += y;
      }
      G[r] = x;
    }
    __syncthreads();
    if (r >= 32 && r < kBT) x += G[31];
    __syncthreads();
    if (r < kBT) G[r] = x * kRcpLn2;
    __syncthreads();
  }
}

template <Gate kGate>
__device__ inline void LoadGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h,
                                int col0) {
  GateRegs<kGate> regs;
  FetchGate<kGate>(regs, p, c, h, col0);
  CommitGate<kGate>(G, regs);
}

__device__ inline void LoadChannelGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h,
                                       int col0) {
  LoadGate<Gate::kChannel>(G, p, c, h, col0);
}

__device__ inline void LoadHeadGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h) {
  LoadGate<Gate::kHead>(G, p, c, h, 0);
}

template <Gate kGate>
__device__ inline float GateAt(const float* G, int r, int c) {
  if constexpr (kGate == Gate::kChannel) {
    return G[r * kLdF32 + c];
  } else {
    return G[r];
  }
}


// ----------------------------------------------------------------------------------------------
// Inter-chunk state passes

struct StateSmem {
  alignas(128) float h[kBK * kLdF32];   // 64 x 68 x 4 = 17408 B: running state (or its gradient)
  alignas(128) float G[kBT * kLdF32];   // 17408 B: gate cumsum
  alignas(128) bf16 a[kBT * kLdBf16];   // 64 x 72 x 2 = 9216 B: k (forward) or q (backward)
  alignas(128) bf16 b[kBT * kLdBf16];   // 9216 B: v (forward) or d_o (backward)
};                                      // 53 KB

// One chunk's 64 x 64 tiles of two [B,T,H,D] tensors, in registers (2 x 16 B per thread each).
struct TileRegs {
  uint4 a[2], b[2];
};

__device__ inline void FetchTiles(TileRegs& regs, const bf16* a, const TensorStrides& sa, int col_a,
                                  const bf16* b, const TensorStrides& sb, int col_b,
                                  const Chunk& c, int h) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int idx = threadIdx.x + m * kThreads, r = idx / 8, c8 = idx % 8;
    regs.a[m] = regs.b[m] = make_uint4(0, 0, 0, 0);
    if (r < c.rows) {
      regs.a[m] = *reinterpret_cast<const uint4*>(RowPtr(a, sa, c.batch, c.t0 + r, h) + col_a + c8 * 8);
      regs.b[m] = *reinterpret_cast<const uint4*>(RowPtr(b, sb, c.batch, c.t0 + r, h) + col_b + c8 * 8);
    }
  }
}

__device__ inline void CommitTiles(bf16* a, bf16* b, const TileRegs& regs) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int idx = threadIdx.x + m * kThreads, r = idx / 8, c8 = idx % 8;
    *reinterpret_cast<uint4*>(a + r * kLdBf16 + c8 * 8) = regs.a[m];
    *reinterpret_cast<uint4*>(b + r * kLdBf16 + c8 * 8) = regs.b[m];
  }
}

// The sequential pass over one sequence's chunks for one (K slice, V slice) tile of the state.
//   forward (kReverse = false): states[chunk] = state entering the chunk, then
//       h = diag(2^G_last) h + (K 2^(G_last - G))^T V; ends in final_state.
//   backward (kReverse = true): states[chunk] = gradient of the state leaving the chunk, then
//       dh = diag(2^G_last) dh + scale (Q 2^G)^T dO; ends in d_initial_state.
// The next chunk's tiles and gate are fetched into registers before the current chunk's work, so
// their memory latency overlaps it.
template <Gate kGate, bool kReverse, typename StateT>
__global__ void __launch_bounds__(kThreads) StatePassKernel(ChunkGatedParams p, StateT* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  StateSmem& s = *reinterpret_cast<StateSmem*>(smem_raw);
  const int v_tiles = p.v_dim / kBK;
  const int k0 = blockIdx.x / v_tiles * kBK, v0 = blockIdx.x % v_tiles * kBK;
  const int h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  const bf16* a_src = kReverse ? p.q : p.k;
  const bf16* b_src = kReverse ? p.d_o : p.v;
  const TensorStrides b_strides = p.v_strides;
  const float* init = kReverse ? p.d_final_state : p.initial_state;
  float* last = kReverse ? p.d_initial_state : p.final_state;

  for (int idx = threadIdx.x; idx < kBK * kBK; idx += kThreads) {
    const int r = idx / kBK, c = idx % kBK;
    s.h[r * kLdF32 + c] = init ? init[StateOffset(p, n, h, k0 + r, v0 + c)] : 0.0f;
  }
  TileRegs tiles;
  GateRegs<kGate> gate;
  {
    const Chunk first = MakeChunk(n, seq, kReverse ? seq.num_chunks - 1 : 0);
    FetchTiles(tiles, a_src, p.qk_strides, k0, b_src, b_strides, v0, first, h);
    FetchGate<kGate>(gate, p, first, h, k0);
  }
  for (int step = 0; step < seq.num_chunks; ++step) {
    const int ci = kReverse ? seq.num_chunks - 1 - step : step;
    const Chunk c = MakeChunk(n, seq, ci);
    __syncthreads();  // the previous product is done with a, b and h
    CommitTiles(s.a, s.b, tiles);
    CommitGate<kGate>(s.G, gate);  // synchronises
    if (step + 1 < seq.num_chunks) {
      const Chunk next = MakeChunk(n, seq, kReverse ? ci - 1 : ci + 1);
      FetchTiles(tiles, a_src, p.qk_strides, k0, b_src, b_strides, v0, next, h);
      FetchGate<kGate>(gate, p, next, h, k0);
    }
    for (int idx = threadIdx.x; idx < kBK * kBK; idx += kThreads) {
      const int r = idx / kBK, col = idx % kBK;
      // r indexes state rows (key channels) for h, and token rows for a.
      float& hv = s.h[r * kLdF32 + col];
      states[StateOffset(p, c.global, h, k0 + r, v0 + col)] = FromFloat<StateT>(hv);
      hv *= exp2f(GateAt<kGate>(s.G, kBT - 1, r));
      bf16& av = s.a[r * kLdBf16 + col];
      const float decay = kReverse ? p.scale * exp2f(GateAt<kGate>(s.G, r, col))
                                   : exp2f(GateAt<kGate>(s.G, kBT - 1, col) -
                                           GateAt<kGate>(s.G, r, col));
      av = __float2bfloat16(ToFloat(av) * decay);
    }
    __syncthreads();
    // h += A^T B with A(kk, j) = a[j][kk] (the column-major view of the token-major tile).
    Mma<false, true, kWarps>(kBK, kBK, kBT, s.a, kLdBf16, s.b, kLdBf16, s.h, kLdF32, true);
  }
  __syncthreads();
  if (last != nullptr) {
    for (int idx = threadIdx.x; idx < kBK * kBK; idx += kThreads) {
      const int r = idx / kBK, c = idx % kBK;
      last[StateOffset(p, n, h, k0 + r, v0 + c)] = s.h[r * kLdF32 + c];
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Intra-chunk scores

// Row offset of sub-chunk s's operand block in a 96-row scratch (s = 1, 2, 3 hold 16, 32, 48
// rows): 0, 16, 48.
__device__ inline int SubBlockOffset(int s) { return 8 * s * (s - 1); }

// A[i][j] (j <= i) += sum over this K slice of q_ik k_jk 2^(G_ik - G_jk) (channel gate), or
// A += Q K^T (head gate: the decay is applied once all slices are in). scratch: 160 rows.
// Starts and ends with the caller's barrier; the elementwise part and the products touch
// disjoint blocks of A.
template <Gate kGate>
__device__ void AccumulateScores(float* A, const bf16* q, const bf16* k, const float* G,
                                 bf16* scratch) {
  if constexpr (kGate == Gate::kHead) {
    Mma<true, false, kWarps>(kBT, kBT, kBK, q, kLdBf16, k, kLdBf16, A, kLdF32, true);
  } else {
    bf16* qsub = scratch;                 // rows 16..63: q_i 2^(G_i - G_n), n = 16 * (i / 16)
    bf16* ksub = scratch + kBT * kLdBf16;  // 96 rows: k_j 2^(G_n - G_j), j < n = 16 s
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, c = idx % kBK;
      if (i >= 16) {
        const int n = i & ~15;
        qsub[i * kLdBf16 + c] = __float2bfloat16(
            ToFloat(q[i * kLdBf16 + c]) * exp2f(G[i * kLdF32 + c] - G[n * kLdF32 + c]));
      }
    }
    for (int idx = threadIdx.x; idx < 96 * kBK; idx += kThreads) {
      const int r = idx / kBK, c = idx % kBK;
      const int s = r < 16 ? 1 : (r < 48 ? 2 : 3);
      const int j = r - SubBlockOffset(s), n = 16 * s;
      ksub[r * kLdBf16 + c] = __float2bfloat16(
          ToFloat(k[j * kLdBf16 + c]) * exp2f(G[n * kLdF32 + c] - G[j * kLdF32 + c]));
    }
    // Diagonal 16 x 16 blocks, elementwise in fp32.
    for (int idx = threadIdx.x; idx < kBT * 16; idx += kThreads) {
      const int i = idx / 16, j = (i & ~15) + idx % 16;
      if (j > i) continue;
      float acc = 0.0f;
      for (int c = 0; c < kBK; ++c) {
        acc += ToFloat(q[i * kLdBf16 + c]) * ToFloat(k[j * kLdBf16 + c]) *
               exp2f(G[i * kLdF32 + c] - G[j * kLdF32 + c]);
      }
      A[i * kLdF32 + j] += acc;
    }
    __syncthreads();
    for (int s = 1; s < 4; ++s) {
      Mma<true, false, kWarps>(16, 16 * s, kBK, qsub + 16 * s * kLdBf16, kLdBf16,
                               ksub + SubBlockOffset(s) * kLdBf16, kLdBf16, A + 16 * s * kLdF32,
                               kLdF32, true);
    }
  }
}

// Ab[i][j] = scale * A[i][j] (times 2^(G_i - G_j) for the head gate) for j <= i, else 0.
template <Gate kGate>
__device__ inline void MaskScores(bf16* Ab, const float* A, const float* G, float scale) {
  for (int idx = threadIdx.x; idx < kBT * kBT; idx += kThreads) {
    const int i = idx / kBT, j = idx % kBT;
    float a = 0.0f;
    if (j <= i) {
      a = A[i * kLdF32 + j] * scale;
      if constexpr (kGate == Gate::kHead) a *= exp2f(G[i] - G[j]);
    }
    Ab[i * kLdBf16 + j] = __float2bfloat16(a);
  }
}

template <Gate kGate>
struct ChunkSmem {
  static constexpr bool kChannel = kGate == Gate::kChannel;
  alignas(128) float A[kBT * kLdF32];     // 17408 B: scores
  alignas(128) float acc[kBT * kLdF32];   // 17408 B: o or dv tile
  alignas(128) float G[kChannel ? kBT * kLdF32 : kBT];  // 17408 B (channel) or 256 B: gate cumsum
  alignas(128) bf16 q[kBT * kLdBf16];     // 9216 B: q slice, then a state tile
  alignas(128) bf16 k[kBT * kLdBf16];     // 9216 B: k slice, then the masked bf16 scores
  // Sub-chunk operands (channel gate: 160 rows), then the v or d_o tile (64 rows).
  alignas(128) bf16 scratch[(kChannel ? 160 : 64) * kLdBf16];  // 23040 B or 9216 B
  // Followed in dynamic shared memory by K/64 decayed q (or k) slices, 9216 B each.
};  // + K/64 slices: K = 128 -> channel 111 KB, head 81 KB (2 blocks per SM)

inline size_t ChunkSmemBytes(Gate gate, int k_dim) {
  const size_t base = gate == Gate::kChannel ? sizeof(ChunkSmem<Gate::kChannel>)
                                             : sizeof(ChunkSmem<Gate::kHead>);
  return base + static_cast<size_t>(k_dim / kBK) * kBT * kLdBf16 * sizeof(bf16);
}

// dst[r][c] = bf16 state tile rows [k0, k0 + 64) x columns [v0, v0 + 64) of block `block`.
template <typename StateT>
__device__ inline void LoadStateTile(bf16* dst, const StateT* states, const ChunkGatedParams& p,
                                     int block, int h, int k0, int v0) {
  if constexpr (std::is_same_v<StateT, bf16>) {  // 16-byte copies (V is a multiple of 64)
    for (int idx = threadIdx.x; idx < kBK * 8; idx += kThreads) {
      const int r = idx / 8, c8 = idx % 8;
      *reinterpret_cast<uint4*>(dst + r * kLdBf16 + c8 * 8) =
          *reinterpret_cast<const uint4*>(states + StateOffset(p, block, h, k0 + r, v0 + c8 * 8));
    }
  } else {
    for (int idx = threadIdx.x; idx < kBK * kBK; idx += kThreads) {
      const int r = idx / kBK, c = idx % kBK;
      dst[r * kLdBf16 + c] = __float2bfloat16(ToFloat(states[StateOffset(p, block, h, k0 + r, v0 + c)]));
    }
  }
}

__device__ inline void ZeroTile(float* t) {
  for (int idx = threadIdx.x; idx < kBT * kLdF32; idx += kThreads) t[idx] = 0.0f;
}

__device__ inline void StoreRows(bf16* base, const TensorStrides& s, const Chunk& c, int h,
                                 int col0, const float* tile) {
  for (int idx = threadIdx.x; idx < kBT * 8; idx += kThreads) {
    const int r = idx / 8, c8 = idx % 8;
    if (r < c.rows) {
      const float* src = tile + r * kLdF32 + c8 * 8;
      alignas(16) __nv_bfloat162 packed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) packed[e] = __floats2bfloat162_rn(src[2 * e], src[2 * e + 1]);
      *reinterpret_cast<uint4*>(RowPtr(base, s, c.batch, c.t0 + r, h) + col0 + c8 * 8) =
          *reinterpret_cast<const uint4*>(packed);
    }
  }
}
// One (chunk, head) per block, in two phases. Phase 1 accumulates the scores A over the K slices
// and keeps each slice's decayed operand; phase 2 walks the V slices, so A is built once:
//   forward (kGradV = false):  o[:, v]  = (Q scale 2^G) h_c[:, v] + scale tril(A) V[:, v]
//   backward (kGradV = true):  dv[:, v] = (K 2^(G_last - G)) dh_c[:, v] + scale tril(A)^T dO[:, v]
template <Gate kGate, bool kGradV, typename StateT>
__global__ void __launch_bounds__(kThreads) ChunkOutputKernel(ChunkGatedParams p,
                                                              const StateT* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ChunkSmem<kGate>& s = *reinterpret_cast<ChunkSmem<kGate>*>(smem_raw);
  bf16* decayed = reinterpret_cast<bf16*>(smem_raw + sizeof(ChunkSmem<kGate>));
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  ZeroTile(s.A);
  if constexpr (kGate == Gate::kHead) LoadHeadGate(s.G, p, c, h);
  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    if constexpr (kGate == Gate::kChannel) {
      LoadChannelGate(s.G, p, c, h, k0);
    } else {
      __syncthreads();
    }
    AccumulateScores<kGate>(s.A, s.q, s.k, s.G, s.scratch);
    bf16* slice = decayed + (k0 / kBK) * kBT * kLdBf16;
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float gi = GateAt<kGate>(s.G, i, col);
      const float x = kGradV ? ToFloat(s.k[i * kLdBf16 + col]) *
                                   exp2f(GateAt<kGate>(s.G, kBT - 1, col) - gi)
                             : ToFloat(s.q[i * kLdBf16 + col]) * p.scale * exp2f(gi);
      slice[i * kLdBf16 + col] = __float2bfloat16(x);
    }
  }
  __syncthreads();
  MaskScores<kGate>(s.k, s.A, s.G, p.scale);
  const bf16* rhs = kGradV ? p.d_o : p.v;
  bf16* out = kGradV ? p.dv : p.o;
  for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
    for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
      __syncthreads();  // the previous product is done with s.q and s.acc
      LoadStateTile(s.q, states, p, c.global, h, k0, v0);
      __syncthreads();
      Mma<true, true, kWarps>(kBT, kBK, kBK, decayed + (k0 / kBK) * kBT * kLdBf16, kLdBf16, s.q,
                              kLdBf16, s.acc, kLdF32, k0 > 0);
    }
    LoadRows(s.scratch, rhs, p.v_strides, c, h, v0);
    __syncthreads();
    // forward: acc += Ab V; backward: acc += Ab^T dO (column-major view of Ab).
    Mma<!kGradV, true, kWarps>(kBT, kBK, kBT, s.k, kLdBf16, s.scratch, kLdBf16, s.acc, kLdF32, true);
    __syncthreads();
    StoreRows(out, p.v_strides, c, h, v0, s.acc);
  }
}

// ----------------------------------------------------------------------------------------------
// dq, dk, dg
//
// Per chunk c and key channel, with dk = dk_inter + dk_intra:
//   dg_t = R_c + sum_{s < t} k_s dk_inter_s + sum_{s >= t} (q_s dq_s - k_s dk_intra_s),
//   R_c = 2^G_last * rowsum(dh_c * h_c)        (h_c: the state entering the chunk)
// which is the sequence-wide reverse cumsum of (q dq - k dk) rewritten per chunk. This form has
// no cancellation between large terms: taking R from the state leaving the chunk instead cancels
// against k dk_inter only up to bf16 rounding, which swamps dg when decays are strong (dg ~ 0).

template <Gate kGate>
struct GradQKSmem {
  static constexpr bool kChannel = kGate == Gate::kChannel;
  alignas(128) float dq[kBT * kLdF32];  // 17408 B: dq tile (head gate: first the dA product), then dg terms
  alignas(128) float dk[kBT * kLdF32];  // 17408 B
  alignas(128) float G[kChannel ? kBT * kLdF32 : kBT];
  alignas(128) float dA[kChannel ? kBT * kLdF32 : 4];   // 17408 B: fp32 scale * tril(dO V^T)
  alignas(128) float tmp[kChannel ? kBT * kLdF32 : 4];  // 17408 B: off-diagonal sub-block products
  alignas(128) float kdk[kChannel ? kBT * kLdF32 : 4];  // 17408 B: k * dk_inter
  alignas(128) bf16 dAb[kBT * kLdBf16];  // 9216 B: bf16 dA (head gate: decay folded in)
  alignas(128) bf16 q[kBT * kLdBf16];    // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];    // 9216 B
  // Four 64-row tiles (d_o, v, h_c, dh_c); channel gate: then 192 rows of sub-chunk operands.
  alignas(128) bf16 work[4 * kBT * kLdBf16];  // 36864 B
  float R[kBT];            // rowsum(dh_c * h_c) for this K slice (bf16 states)
  float prefix_half[kBT];  // channel: sum of k dk_inter over rows 0..31
  float suffix_half[kBT];  // channel: sum of dg terms over rows 32..63
  float dg_row[kBT];       // head: sum over K of (q dq - k dk)
  float kdk_row[kBT];      // head: sum over K of k dk_inter
  float r_total;           // head: sum over K of 2^G_last R
};  // channel ~169 KB (1 block per SM), head ~100 KB (2 blocks per SM)

__device__ inline float WarpSum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <Gate kGate, typename StateT>
__global__ void __launch_bounds__(kThreads) GradQKKernel(ChunkGatedParams p, const StateT* states,
                                                         const StateT* d_states) {
  constexpr bool kChannel = kGate == Gate::kChannel;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  GradQKSmem<kGate>& s = *reinterpret_cast<GradQKSmem<kGate>*>(smem_raw);
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  const int lane = threadIdx.x % 32;
  bf16* xo = s.work;                    // d_o slice
  bf16* xv = s.work + kBT * kLdBf16;     // v slice
  bf16* hs = s.work + 2 * kBT * kLdBf16;   // h_c tile
  bf16* dhs = s.work + 3 * kBT * kLdBf16;  // dh_c tile

  if constexpr (!kChannel) LoadHeadGate(s.G, p, c, h);
  // dA = dO V^T over all V slices (accumulated in s.dA, or in s.dq for the head gate).
  float* dA_acc = kChannel ? s.dA : s.dq;
  for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
    __syncthreads();
    LoadRows(xo, p.d_o, p.v_strides, c, h, v0);
    LoadRows(xv, p.v, p.v_strides, c, h, v0);
    __syncthreads();
    Mma<true, false, kWarps>(kBT, kBT, kBK, xo, kLdBf16, xv, kLdBf16, dA_acc, kLdF32, v0 > 0);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kBT * kBT; idx += kThreads) {
    const int i = idx / kBT, j = idx % kBT;
    float d = 0.0f;
    if (j <= i) {
      d = dA_acc[i * kLdF32 + j] * p.scale;
      if constexpr (!kChannel) d *= exp2f(s.G[i] - s.G[j]);
    }
    if constexpr (kChannel) s.dA[i * kLdF32 + j] = d;
    s.dAb[i * kLdBf16 + j] = __float2bfloat16(d);
  }
  if (threadIdx.x < kBT) {
    s.dg_row[threadIdx.x] = 0.0f;
    s.kdk_row[threadIdx.x] = 0.0f;
  }
  if (threadIdx.x == 0) s.r_total = 0.0f;

  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    if constexpr (kChannel) LoadChannelGate(s.G, p, c, h, k0);
    // Inter-chunk parts: dq = dO h_c^T and dk = V dh_c^T (decays applied below), and
    // R = rowsum(dh_c * h_c) from the same state tiles (4 threads per row, 16 columns each).
    // B(vv, kk) = hs[kk][vv]: the column-major view of a state tile.
    for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
      __syncthreads();
      LoadRows(xo, p.d_o, p.v_strides, c, h, v0);
      LoadRows(xv, p.v, p.v_strides, c, h, v0);
      LoadStateTile(hs, states, p, c.global, h, k0, v0);
      LoadStateTile(dhs, d_states, p, c.global, h, k0, v0);
      __syncthreads();
      Mma<true, false, kWarps>(kBT, kBK, kBK, xo, kLdBf16, hs, kLdBf16, s.dq, kLdF32, v0 > 0);
      Mma<true, false, kWarps>(kBT, kBK, kBK, xv, kLdBf16, dhs, kLdBf16, s.dk, kLdF32, v0 > 0);
      const int r = threadIdx.x / 4, part = threadIdx.x % 4;
      float acc = 0.0f;
#pragma unroll
      for (int col = part * 16; col < part * 16 + 16; ++col) {
        acc += ToFloat(dhs[r * kLdBf16 + col]) * ToFloat(hs[r * kLdBf16 + col]);
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (part == 0) s.R[r] = (v0 == 0 ? 0.0f : s.R[r]) + acc;
    }
    __syncthreads();
    // One warp covers 32 columns of one row in these loops (kBK = 64, kThreads = 256).
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float gi = GateAt<kGate>(s.G, i, col);
      s.dq[i * kLdF32 + col] *= p.scale * exp2f(gi);
      const float dk_inter =
          s.dk[i * kLdF32 + col] * exp2f(GateAt<kGate>(s.G, kBT - 1, col) - gi);
      s.dk[i * kLdF32 + col] = dk_inter;
      const float kd = ToFloat(s.k[i * kLdBf16 + col]) * dk_inter;
      if constexpr (kChannel) {
        s.kdk[i * kLdF32 + col] = kd;
      } else {
        const float sum = WarpSum(kd);
        if (lane == 0) atomicAdd(&s.kdk_row[i], sum);
      }
    }
    __syncthreads();
    // Intra-chunk parts: dq += tril(dA) K, dk += tril(dA)^T Q, with the decays.
    if constexpr (!kChannel) {
      Mma<true, true, kWarps>(kBT, kBK, kBT, s.dAb, kLdBf16, s.k, kLdBf16, s.dq, kLdF32, true);
      Mma<false, true, kWarps>(kBT, kBK, kBT, s.dAb, kLdBf16, s.q, kLdBf16, s.dk, kLdF32, true);
    } else {
      bf16* ksub = s.work;                 // 96 rows, as in AccumulateScores
      bf16* qsub = s.work + 96 * kLdBf16;  // 96 rows: q_i 2^(G_i - G_n'), n' = 16 s' + 15
      for (int idx = threadIdx.x; idx < 96 * kBK; idx += kThreads) {
        const int r = idx / kBK, col = idx % kBK;
        const int sk = r < 16 ? 1 : (r < 48 ? 2 : 3);
        const int j = r - SubBlockOffset(sk), n = 16 * sk;
        ksub[r * kLdBf16 + col] = __float2bfloat16(
            ToFloat(s.k[j * kLdBf16 + col]) * exp2f(s.G[n * kLdF32 + col] - s.G[j * kLdF32 + col]));
        // qsub blocks for s' = 0, 1, 2 hold rows i >= 16 s' + 16 (48, 32, 16 rows) at 0, 48, 80.
        const int sq = r < 48 ? 0 : (r < 80 ? 1 : 2);
        const int i = 16 * sq + 16 + r - (sq == 0 ? 0 : (sq == 1 ? 48 : 80));
        const int nq = 16 * sq + 15;
        qsub[r * kLdBf16 + col] = __float2bfloat16(
            ToFloat(s.q[i * kLdBf16 + col]) * exp2f(s.G[i * kLdF32 + col] - s.G[nq * kLdF32 + col]));
      }
      __syncthreads();
      for (int sb = 1; sb < 4; ++sb) {  // dq rows of sub-chunk sb from columns j < 16 sb
        Mma<true, true, kWarps>(16, kBK, 16 * sb, s.dAb + 16 * sb * kLdBf16, kLdBf16,
                                ksub + SubBlockOffset(sb) * kLdBf16, kLdBf16,
                                s.tmp + 16 * sb * kLdF32, kLdF32, false);
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
        const int i = idx / kBK, col = idx % kBK;
        const int n = i & ~15;
        const float gi = s.G[i * kLdF32 + col];
        float acc = i >= 16 ? exp2f(gi - s.G[n * kLdF32 + col]) * s.tmp[i * kLdF32 + col] : 0.0f;
        for (int j = n; j <= i; ++j) {
          acc += s.dA[i * kLdF32 + j] * ToFloat(s.k[j * kLdBf16 + col]) *
                 exp2f(gi - s.G[j * kLdF32 + col]);
        }
        s.dq[i * kLdF32 + col] += acc;
      }
      __syncthreads();
      for (int sb = 0; sb < 3; ++sb) {  // dk rows of sub-chunk sb from rows i >= 16 sb + 16
        const int first_i = 16 * sb + 16;
        Mma<false, true, kWarps>(16, kBK, kBT - first_i, s.dAb + first_i * kLdBf16 + 16 * sb,
                                 kLdBf16, qsub + (sb == 0 ? 0 : (sb == 1 ? 48 : 80)) * kLdBf16,
                                 kLdBf16, s.tmp + 16 * sb * kLdF32, kLdF32, false);
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
        const int j = idx / kBK, col = idx % kBK;
        const int n = (j & ~15) + 15;
        const float gj = s.G[j * kLdF32 + col];
        float acc = j < 48 ? exp2f(s.G[n * kLdF32 + col] - gj) * s.tmp[j * kLdF32 + col] : 0.0f;
        for (int i = j; i <= n; ++i) {
          acc += s.dA[i * kLdF32 + j] * ToFloat(s.q[i * kLdBf16 + col]) *
                 exp2f(s.G[i * kLdF32 + col] - gj);
        }
        s.dk[j * kLdF32 + col] += acc;
      }
    }
    __syncthreads();
    // Write dq, dk; keep the dg terms q dq - k dk (+ k dk_inter: the channel gate's s >= t part).
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float dq = s.dq[i * kLdF32 + col], dk = s.dk[i * kLdF32 + col];
      float term = ToFloat(s.q[i * kLdBf16 + col]) * dq - ToFloat(s.k[i * kLdBf16 + col]) * dk;
      if (i < c.rows) {
        RowPtr(p.dq, p.qk_strides, c.batch, c.t0 + i, h)[k0 + col] = __float2bfloat16(dq);
        RowPtr(p.dk, p.qk_strides, c.batch, c.t0 + i, h)[k0 + col] = __float2bfloat16(dk);
      }
      if constexpr (kChannel) {
        s.dq[i * kLdF32 + col] = term + s.kdk[i * kLdF32 + col];
      } else {
        term = WarpSum(term);
        if (lane == 0) atomicAdd(&s.dg_row[i], term);
      }
    }
    __syncthreads();
    if constexpr (kChannel) {
      // Per column: exclusive prefix of k dk_inter, inclusive suffix of the terms; two threads per
      // column, 32 rows each, joined through prefix_half / suffix_half.
      const int col = threadIdx.x % 64, half = threadIdx.x / 64;
      if (half < 2) {
        float pre = 0.0f, suf = 0.0f;
        for (int i = half * 32; i < half * 32 + 32; ++i) {
          const float kd = s.kdk[i * kLdF32 + col];
          s.kdk[i * kLdF32 + col] = pre;
          pre += kd;
        }
        for (int i = half * 32 + 31; i >= half * 32; --i) {
          suf += s.dq[i * kLdF32 + col];
          s.dq[i * kLdF32 + col] = suf;
        }
        if (half == 0) s.prefix_half[col] = pre; else s.suffix_half[col] = suf;
      }
      __syncthreads();
      if (half < 2 && p.dg != nullptr) {
        const float base = s.R[col] * exp2f(s.G[(kBT - 1) * kLdF32 + col]) +
                           (half == 1 ? s.prefix_half[col] : s.suffix_half[col]);
        for (int i = half * 32; i < min(half * 32 + 32, c.rows); ++i) {
          RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h)[k0 + col] =
              base + s.kdk[i * kLdF32 + col] + s.dq[i * kLdF32 + col];
        }
      }
    } else if (threadIdx.x == 0) {
      float acc = 0.0f;
      for (int r = 0; r < kBK; ++r) acc += s.R[r];
      s.r_total += acc * exp2f(s.G[kBT - 1]);
    }
  }
  if constexpr (!kChannel) {
    __syncthreads();
    const int i = threadIdx.x;
    if (i < c.rows && p.dg != nullptr && p.g != nullptr) {
      float acc = s.r_total;
      for (int r = 0; r < i; ++r) acc += s.kdk_row[r];
      for (int r = i; r < kBT; ++r) acc += s.dg_row[r] + s.kdk_row[r];
      *RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h) = acc;
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Host side

inline int NumSeqs(const ChunkGatedParams& p) {
  return p.cu_seqlens != nullptr ? p.num_seqs : p.batch;
}

inline int TotalChunks(const ChunkGatedParams& p) {
  return p.cu_seqlens != nullptr ? p.total_chunks
                                 : p.batch * ((p.seq_len + kBT - 1) / kBT);
}

inline size_t StateBytes(const ChunkGatedParams& p, int blocks, size_t elem) {
  return static_cast<size_t>(blocks) * p.heads * p.k_dim * p.v_dim * elem;
}

inline size_t AlignUp(size_t x) { return (x + 255) / 256 * 256; }

// Per-chunk states (bf16): the forward keeps h; the backward keeps h and dh.
inline size_t WorkspaceBytes(const ChunkGatedParams& p, bool backward) {
  return (backward ? 2 : 1) * AlignUp(StateBytes(p, TotalChunks(p), sizeof(bf16)));
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
  const bool inputs = p.q && p.k && p.v && IsAligned16(p.q) && IsAligned16(p.k) &&
                      IsAligned16(p.v) && Bf16RowsAligned(p.qk_strides) &&
                      Bf16RowsAligned(p.v_strides) && p.workspace;
  const bool outputs = backward ? p.d_o && p.dq && p.dk && p.dv && IsAligned16(p.d_o) &&
                                      IsAligned16(p.dv) && (p.dg != nullptr || p.g == nullptr)
                                : p.o != nullptr && IsAligned16(p.o);
  return shapes && gates && inputs && outputs ? cudaSuccess : cudaErrorInvalidValue;
}

// Raises the kernel's dynamic shared-memory limit (needed above 48 KB) and launches it.
template <typename... Args>
cudaError_t LaunchKernel(void (*kernel)(ChunkGatedParams, Args...), dim3 grid, size_t smem,
                         cudaStream_t stream, const ChunkGatedParams& p, Args... args) {
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  kernel<<<grid, kThreads, smem, stream>>>(p, args...);
  return cudaGetLastError();
}

template <Gate kGate>
cudaError_t Forward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, kGate, false); err != cudaSuccess) return err;
  ChunkGatedParams p = params;
  p.num_seqs = NumSeqs(params);
  p.total_chunks = TotalChunks(params);
  auto* states = static_cast<bf16*>(p.workspace);
  const int tiles = p.k_dim / kBK * (p.v_dim / kBK);
  cudaError_t err = LaunchKernel<bf16*>(StatePassKernel<kGate, false, bf16>,
                                        dim3(tiles, p.heads, p.num_seqs), sizeof(StateSmem),
                                        stream, p, states);
  if (err != cudaSuccess) return err;
  return LaunchKernel<const bf16*>(ChunkOutputKernel<kGate, false, bf16>,
                                   dim3(p.total_chunks, p.heads), ChunkSmemBytes(kGate, p.k_dim),
                                   stream, p, states);
}

template <Gate kGate>
cudaError_t Backward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (cudaError_t err = Validate(params, kGate, true); err != cudaSuccess) return err;
  ChunkGatedParams p = params;
  p.num_seqs = NumSeqs(params);
  p.total_chunks = TotalChunks(params);
  auto* states = static_cast<bf16*>(p.workspace);
  auto* d_states = reinterpret_cast<bf16*>(static_cast<unsigned char*>(p.workspace) +
                                           AlignUp(StateBytes(p, p.total_chunks, sizeof(bf16))));
  const int tiles = p.k_dim / kBK * (p.v_dim / kBK);
  const dim3 seq_grid(tiles, p.heads, p.num_seqs);
  ChunkGatedParams no_final = p;  // the forward already wrote the final state
  no_final.final_state = nullptr;
  cudaError_t err = LaunchKernel<bf16*>(StatePassKernel<kGate, false, bf16>, seq_grid,
                                        sizeof(StateSmem), stream, no_final, states);
  if (err != cudaSuccess) return err;
  err = LaunchKernel<bf16*>(StatePassKernel<kGate, true, bf16>, seq_grid, sizeof(StateSmem),
                            stream, p, d_states);
  if (err != cudaSuccess) return err;
  err = LaunchKernel<const bf16*>(ChunkOutputKernel<kGate, true, bf16>,
                                  dim3(p.total_chunks, p.heads), ChunkSmemBytes(kGate, p.k_dim),
                                  stream, p, d_states);
  if (err != cudaSuccess) return err;
  return LaunchKernel<const bf16*, const bf16*>(GradQKKernel<kGate, bf16>,
                                                dim3(p.total_chunks, p.heads),
                                                sizeof(GradQKSmem<kGate>), stream, p, states,
                                                d_states);
}

}  // namespace flame::kernels::gated_chunk
