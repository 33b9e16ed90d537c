// Where the sequences and chunks of a chunked batch lie: the one reader of cu_seqlens and
// chunk_offsets for every chunk kernel -- the gated chunk kernels (chunk_gated.cuh, device code)
// and the delta-rule steps (chunk_delta_steps.h, host and device code, so that the CPU test runs
// the same steps). Templated on the params struct: ChunkGatedParams and ChunkDeltaParams name
// these fields alike, and each family passes its chunk length.
#pragma once

#include <cstdint>

#ifndef FLAME_HD
#if defined(__CUDACC__)
#define FLAME_HD __host__ __device__
#else
#define FLAME_HD
#endif
#endif

namespace flame::kernels {

// One sequence: its batch row, first token and length, and its chunks' range over the batch.
struct ChunkSeq {
  int batch, bos, len, first_chunk, num_chunks;
};

// Sequence n: batch row n of a fixed-length batch, or tokens cu_seqlens[n]..cu_seqlens[n+1] of a
// packed one (batch row 0), whose chunks start at chunk_offsets[n].
template <int kChunk, typename Params>
FLAME_HD inline ChunkSeq LocateSeq(const Params& p, int n) {
  ChunkSeq s;
  if (p.cu_seqlens == nullptr) {
    s.batch = n;
    s.bos = 0;
    s.len = p.seq_len;
    s.num_chunks = (p.seq_len + kChunk - 1) / kChunk;
    s.first_chunk = n * s.num_chunks;
  } else {
    s.batch = 0;
    s.bos = p.cu_seqlens[n];
    s.len = p.cu_seqlens[n + 1] - s.bos;
    s.first_chunk = p.chunk_offsets[n];
    s.num_chunks = p.chunk_offsets[n + 1] - s.first_chunk;
  }
  return s;
}

// The sequence that holds chunk `global` (an index over the whole batch): with cu_seqlens, the
// last n with chunk_offsets[n] <= global, by bisection over the N + 1 offsets.
template <int kChunk, typename Params>
FLAME_HD inline int SeqOfChunk(const Params& p, int global) {
  if (p.cu_seqlens == nullptr) return global / ((p.seq_len + kChunk - 1) / kChunk);
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.chunk_offsets[mid] <= global) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace flame::kernels
