// The sequential state passes of the chunked delta rule (formulas in chunk_delta_steps.h), one
// block per (V slice of 32, head, sequence), the K x 32 state slice held in registers in fp32.
// Slices of 32 rather than 64 give twice the blocks, which the passes need: a (4, 2048, 16, 128)
// batch has only 4 x 16 sequence-heads to spread over 132 multiprocessors.
//
// The passes are latency-bound: per chunk they read a few 64 x 64 tiles and multiply them with
// the state, and every chunk waits for the one before. So each pass consumes its chunk tiles as
// one stream, in the order the arithmetic needs them, through a ring of shared-memory slots
// filled by asynchronous copies (cp.async) as many tiles ahead as the ring has slots, less one:
// the next tiles, also the next chunk's, are in flight while the current one is multiplied. Row
// scalings that the tiles would need on the way in are moved onto the products instead
// (diag(d) K^T x = K^T (diag(d) x)), so that the tiles are raw copies. Each warp owns fixed
// 16 x 16 tiles of the state and of the chunk's 64 x 32 products and accumulates them in
// registers, so a product needs no block barrier of its own: the ring's one barrier per tile
// orders everything.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_tiles.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Ring slots: as many as let two blocks share a multiprocessor (each under 113 KB of its 228 KB
// of shared memory). The K x 32 state copy grows with K, so K > 128 takes one slot fewer; the
// backward keeps three more tiles besides, and takes one slot fewer again. (With one block per
// multiprocessor, (8, 4096, 8, 256)'s 512 blocks ran in four waves instead of two.)
constexpr int ForwardRing(int k_dim) { return k_dim <= 128 ? 4 : 3; }
constexpr int BackwardRing(int k_dim) { return k_dim <= 128 ? 3 : 2; }
constexpr int kBV = 32;            // V columns per block
// Leading dimensions by how the tensor cores read a tile. A fragment lane (g, t) reads element
// (g, t) of a tile read as stored, but (t, g) of one read transposed (the state and new values as
// B operands, K, Q, W, M as transposed A operands): rows padded by 4 floats spread the first over
// all 32 banks, rows padded by 8 the second.
constexpr int kLdV = kBV + 8;  // the 32-wide tiles: read as B operands
constexpr int kLdT = kBT + 8;  // 64-wide ring tiles read transposed (kLd for those read as stored)
constexpr int kTileV = kBT * kLdV;
constexpr int kSlot = kBT * kLdT;  // floats in a ring slot

// Warp w's 16 x 16 tile of a 64 x 32 chunk product: rows WarpRow(), columns WarpCol().
__device__ __forceinline__ int WarpRow() { return threadIdx.x / 32 / 2 * 16; }
__device__ __forceinline__ int WarpCol() { return threadIdx.x / 32 % 2 * 16; }

// acc += A B for warp w's tile, A 64 x 64 (a at A(WarpRow(), 0): a 64-wide tile row-major with
// leading dimension kLd, or with kAT the transpose of one with leading dimension kLdT, a at its
// column WarpRow()), B 64 x 32 row-major (b at B(0, WarpCol()), leading dimension kLdV).
template <bool kAT>
__device__ __forceinline__ void MmaWarp(tile::WarpAcc16& acc, const float* a, const float* b) {
  tile::MmaTf32Warp16<!kAT, true>(acc, kBT, a, kAT ? kLdT : kLd, b, kLdV);
}

__device__ __forceinline__ void StoreWarpTile(float* c, const tile::WarpAcc16& acc) {
  acc.Store(c + WarpRow() * kLdV + WarpCol(), kLdV);
}

// The K x 32 state slice of a block, in registers: warp w holds, for each 64-row slice j of K,
// the 16 x 16 tile at rows 64 j + WarpRow(), columns WarpCol(). So the chunk's j-th 64-wide tile
// of K (or Q, W) updates one tile per warp. Loops over j run to kMaxKSlices, unrolled, with a
// guard: indexed by a constant, the tiles stay in registers.
struct StateTiles {
  tile::WarpAcc16 part[kMaxKSlices];

  __device__ static int Row(int j) { return j * kBT + WarpRow(); }
  // From / to a K x 32 slice in shared memory (leading dimension kLdV): own tiles only. Store
  // rounds the copy to TF32 with kOperand (the registers keep fp32).
  __device__ void Load(const float* s, int nk) {
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) part[j].Load(s + Row(j) * kLdV + WarpCol(), kLdV);
    }
  }
  template <bool kOperand>
  __device__ void Store(float* s, int nk) const {
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) part[j].Store<kOperand>(s + Row(j) * kLdV + WarpCol(), kLdV);
    }
    __syncwarp();
  }
  // To the scratch copy of a K x V state (dst at column v0 of row 0; 8-byte aligned rows).
  __device__ void StoreScratch(float* dst, int v_dim, int nk) const {
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) part[j].StoreGlobal(dst + int64_t{Row(j)} * v_dim + WarpCol(), v_dim);
    }
  }
  __device__ void Scale(float f, int nk) {
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      part[j].Scale(j < nk ? f : 1.0f);
    }
  }
};

// ----------------------------------------------------------------------------------------------
// Asynchronous tile copies into a ring slot; rows past the chunk's end are zero-filled.

// kWidth columns from col0 into rows of leading dimension kLdSlot. A thread copies the same
// 16-byte column piece of every kRowStep-th row, so its addresses advance by a fixed stride (the
// passes issue a tile per ring item: keep the address arithmetic out of them); rows past the end
// read nothing (zero-fill), from the first row's address.
template <int kWidth, int kLdSlot>
__device__ inline void IssueTok(float* slot, const float* src, const ChunkDeltaParams& p,
                                const Chunk& c, int h, int dim, int col0) {
  constexpr int kPieces = kWidth / 4, kRowStep = kThreads / kPieces;
  static_assert(kBT % kRowStep == 0, "every thread copies the same number of rows");
  const int r0 = threadIdx.x / kPieces, c4 = threadIdx.x % kPieces;
  const int64_t row_stride = int64_t{p.heads} * dim;
  const float* first = TokPtr(src, p, c, 0, h, dim) + col0 + c4 * 4;
  const float* from = first + r0 * row_stride;
  float* to = slot + r0 * kLdSlot + c4 * 4;
#pragma unroll
  for (int i = 0; i < kBT / kRowStep; ++i) {
    const bool valid = r0 + i * kRowStep < c.rows;
    __pipeline_memcpy_async(to, valid ? from : first, 16, valid ? 0 : 16);
    to += kRowStep * kLdSlot;
    from += kRowStep * row_stride;
  }
}

// A 64 x 64 chunk matrix, to be read transposed.
__device__ inline void IssueMatT(float* slot, const float* src) {
  for (int idx = threadIdx.x; idx < kBT * 16; idx += kThreads) {
    const int r = idx / 16, c4 = idx % 16;
    __pipeline_memcpy_async(slot + r * kLdT + c4 * 4, src + r * kBT + c4 * 4, 16);
  }
}

// 32 columns of a bf16 [B,T,H,D] tensor, stored densely (32 bf16 per row) in the slot.
__device__ inline void IssueInV(float* slot, const __nv_bfloat16* src, const TensorStrides& st,
                                const Chunk& c, int h, int col0) {
  auto* dst = reinterpret_cast<__nv_bfloat16*>(slot);
  for (int idx = threadIdx.x; idx < kBT * (kBV / 8); idx += kThreads) {
    const int r = idx / (kBV / 8), c8 = idx % (kBV / 8);
    const bool valid = r < c.rows;
    __pipeline_memcpy_async(dst + r * kBV + c8 * 8,
                            src + In(st, c.batch, c.t0 + (valid ? r : 0), h) + col0 + c8 * 8, 16,
                            valid ? 0 : 16);
  }
}

// The ring: item g of the stream lives in slot g % kSlots. Wait(g) waits for item g's copies,
// synchronises the block (every thread is then done with item g - 1 and with whatever it did
// before), then issues item g + kSlots - 1 into item g - 1's slot (through `issue`, which commits
// nothing; every thread commits exactly one copy group per item). The barrier is the only one a
// tile needs. Items are issued in order, so the ring counts the next one's chunk, its place in
// the chunk and its slot instead of dividing.
template <int kSlots, typename Issue>
struct TileRing {
  float* slots;
  int items;      // in the stream
  int per_chunk;  // items per chunk
  Issue issue;    // issue(chunk ordinal, item within the chunk, slot)
  int fill = 0, fill_chunk = 0, fill_item = 0, fill_slot = 0;  // the next item to issue

  __device__ void Start() {
    for (int g = 0; g < kSlots - 1; ++g) Fill();
  }
  __device__ const float* Wait(int g) {
    __pipeline_wait_prior(kSlots - 2);
    __syncthreads();
    Fill();
    return slots + (g % kSlots) * kSlot;
  }
  __device__ void Fill() {
    if (fill < items) issue(fill_chunk, fill_item, slots + fill_slot * kSlot);
    __pipeline_commit();
    ++fill;
    if (++fill_item == per_chunk) fill_item = 0, ++fill_chunk;
    if (++fill_slot == kSlots) fill_slot = 0;
  }
};

template <int kSlots, typename Issue>
__device__ TileRing<kSlots, Issue> MakeRing(float* slots, int items, int per_chunk, Issue issue) {
  return TileRing<kSlots, Issue>{slots, items, per_chunk, issue};
}

// ----------------------------------------------------------------------------------------------
// Forward: per chunk, in order,
//   S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut).
// Stream per chunk: W slices (K/64), U, K slices (K/64).
template <int kSlots>
__global__ void __launch_bounds__(kThreads, 2) StateForwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT, per_chunk = 2 * nk + 1;
  float* s_copy = reinterpret_cast<float*>(smem4);  // S, for the product W S
  float* acc = s_copy + K * kLdV;                    // W S, then the decayed new values
  float* G = acc + kTileV;
  float* ring_slots = G + kBT;
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  auto ring = MakeRing<kSlots>(ring_slots, seq.num_chunks * per_chunk, per_chunk,
                               [&](int ci, int item, float* slot) {
    const Chunk c = MakeChunk(p, seq, ci);
    if (item < nk) {
      IssueTok<kBT, kLd>(slot, b.s.W, p, c, h, K, item * kBT);
    } else if (item == nk) {
      IssueTok<kBV, kLdV>(slot, b.s.U, p, c, h, V, v0);
    } else {
      IssueTok<kBT, kLdT>(slot, b.s.kn, p, c, h, K, (item - nk - 1) * kBT);
    }
  });
  ring.Start();
  LoadState<kBV, kLdV, false>(s_copy, p.initial_state ? p.initial_state + State(p, n, h) : nullptr,
                              K, V, v0);
  __syncthreads();
  StateTiles S;
  S.Load(s_copy, nk);
  int g = 0;
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const Chunk c = MakeChunk(p, seq, ci);
    // Earlier readers of s_copy, acc and G are behind the previous chunk's barriers.
    S.Store<true>(s_copy, nk);
    S.StoreScratch(b.s.S + State(p, c.global, h) + v0, V, nk);
    LoadRowScalars(G, nullptr, b, c, h);
    tile::WarpAcc16 ws;  // W S
    ws.Zero();
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
        const float* w = ring.Wait(g++);
        MmaWarp<false>(ws, w + WarpRow() * kLd, s_copy + j * kBT * kLdV + WarpCol());
      }
    }
    StoreWarpTile(acc, ws);
    const float* u = ring.Wait(g++);
    const float G_last = G[c.rows - 1];
    float* ut = TokPtr(b.s.Ut, p, c, 0, h, V) + v0;
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      const float val = u[x] - acc[x];
      if (r < c.rows) ut[int64_t{r} * p.heads * V + col] = val;
      acc[x] = tile::RoundTf32(val * __expf(G_last - G[r]));
    }
    __syncthreads();
    S.Scale(expf(G_last), nk);
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
        const float* k = ring.Wait(g++);
        MmaWarp<true>(S.part[j], k + WarpRow(), acc + WarpCol());
      }
    }
  }
  if (p.final_state) {
    S.Store<false>(s_copy, nk);
    __syncthreads();
    StoreState<kBV, kLdV>(p.final_state + State(p, n, h), s_copy, K, V, v0);
  }
}

inline size_t StateForwardSmem(int k_dim) {
  return (k_dim * kLdV + kTileV + ForwardRing(k_dim) * kSlot + kBT) * sizeof(float);
}

inline void (*StateForwardFor(int k_dim))(StepBase) {
  return ForwardRing(k_dim) == 4 ? StateForwardKernel<4> : StateForwardKernel<3>;
}

// ----------------------------------------------------------------------------------------------
// Backward: per chunk, in reverse, with dS the gradient of the state leaving the chunk,
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + M^T (scale dO);
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) + W^T (-dUt).
// Stream per chunk: K slices, dO, M, Q slices, W slices.
template <int kSlots>
__global__ void __launch_bounds__(kThreads, 2) StateBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT, per_chunk = 3 * nk + 2;
  float* ds_copy = reinterpret_cast<float*>(smem4);  // dS, for the product K dS
  float* dut = ds_copy + K * kLdV;
  float* d_o = dut + kTileV;   // scale dO, then -dUt
  float* d_og = d_o + kTileV;  // scale diag(gamma) dO
  float* G = d_og + kTileV;
  float* ring_slots = G + kBT;
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  auto ring = MakeRing<kSlots>(ring_slots, seq.num_chunks * per_chunk, per_chunk,
                               [&](int ci, int item, float* slot) {
    const Chunk c = MakeChunk(p, seq, seq.num_chunks - 1 - ci);
    if (item < nk) {
      IssueTok<kBT, kLd>(slot, b.s.kn, p, c, h, K, item * kBT);
    } else if (item == nk) {
      IssueInV(slot, p.d_o, p.v_strides, c, h, v0);
    } else if (item == nk + 1) {
      IssueMatT(slot, b.s.M + Mat(p, c.global, h));
    } else if (item < 2 * nk + 2) {
      IssueTok<kBT, kLdT>(slot, b.s.qn, p, c, h, K, (item - nk - 2) * kBT);
    } else {
      IssueTok<kBT, kLdT>(slot, b.s.W, p, c, h, K, (item - 2 * nk - 2) * kBT);
    }
  });
  ring.Start();
  LoadState<kBV, kLdV, false>(ds_copy,
                              p.d_final_state ? p.d_final_state + State(p, n, h) : nullptr, K, V,
                              v0);
  __syncthreads();
  StateTiles dS;
  dS.Load(ds_copy, nk);
  int g = 0;
  for (int ci = seq.num_chunks - 1; ci >= 0; --ci) {
    const Chunk c = MakeChunk(p, seq, ci);
    // Earlier readers of ds_copy, dut, d_o, d_og and G are behind the previous chunk's barriers.
    dS.Store<true>(ds_copy, nk);
    dS.StoreScratch(b.s.dS + State(p, c.global, h) + v0, V, nk);
    LoadRowScalars(G, nullptr, b, c, h);
    tile::WarpAcc16 du;  // K dS, then + M^T (scale dO)
    du.Zero();
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
        const float* k = ring.Wait(g++);
        MmaWarp<false>(du, k + WarpRow() * kLd, ds_copy + j * kBT * kLdV + WarpCol());
      }
    }
    StoreWarpTile(dut, du);
    const auto* d_o_in = reinterpret_cast<const __nv_bfloat16*>(ring.Wait(g++));
    const float G_last = G[c.rows - 1];
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      const float scaled = p.scale * __bfloat162float(d_o_in[e]);
      d_o[x] = tile::RoundTf32(scaled);
      d_og[x] = tile::RoundTf32(scaled * __expf(G[r]));
      dut[x] *= __expf(G_last - G[r]);
    }
    const float* m = ring.Wait(g++);
    du.Load(dut + WarpRow() * kLdV + WarpCol(), kLdV);
    MmaWarp<true>(du, m + WarpRow(), d_o + WarpCol());
    StoreWarpTile(dut, du);
    __syncthreads();
    float* dut_out = TokPtr(b.s.dUt, p, c, 0, h, V) + v0;
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      if (r < c.rows) dut_out[int64_t{r} * p.heads * V + col] = dut[x];
      d_o[x] = -tile::RoundTf32(dut[x]);
    }
    __syncthreads();
    dS.Scale(expf(G_last), nk);
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
        const float* q = ring.Wait(g++);
        MmaWarp<true>(dS.part[j], q + WarpRow(), d_og + WarpCol());
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
        const float* w = ring.Wait(g++);
        MmaWarp<true>(dS.part[j], w + WarpRow(), d_o + WarpCol());
      }
    }
  }
  if (p.d_initial_state) {
    dS.Store<false>(ds_copy, nk);
    __syncthreads();
    StoreState<kBV, kLdV>(p.d_initial_state + State(p, n, h), ds_copy, K, V, v0);
  }
}

inline size_t StateBackwardSmem(int k_dim) {
  return (k_dim * kLdV + 3 * kTileV + BackwardRing(k_dim) * kSlot + kBT) * sizeof(float);
}

inline void (*StateBackwardFor(int k_dim))(StepBase) {
  return BackwardRing(k_dim) == 3 ? StateBackwardKernel<3> : StateBackwardKernel<2>;
}

}  // namespace flame::kernels::delta_chunk::tiles
