// Gated linear attention (GLA) with a per-channel gate, fla's `chunk_gla` contract.
//
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ        S: [K, V] per head
//   o_t = S_tᵀ (scale · q_t)
//
// Layout [B, T, H, D] (fla's; head-first is gone there too):
//   q, k, g  [B, T, H, K]   g is the natural-log decay (<= 0), per key channel
//   v        [B, T, H, V]
//   initial_state / final_state  [N, H, K, V], float32 (float64 when the inputs are float64);
//   N = B, or the number of sequences when cu_seqlens is given.
//   cu_seqlens  int64 [N + 1], strictly increasing from 0 to T, B must be 1 (packed varlen);
//   chunks never cross a sequence boundary and every sequence starts from its own state.
// The output has v's dtype; the arithmetic is float32 (float64 for float64 inputs).
//
// ChunkGla is the one entry point the model calls. It dispatches on the device: CUDA tensors run
// the kernels of kernels/gla (bf16 q, k, v and fp32 g and states, converted on the way in; K and V
// multiples of 64) inside a torch::autograd::Function in FLAME_CUDA builds; CPU tensors, and
// arguments the kernel cannot take (float64, other K or V; a warning says so once), run the
// differentiable ATen reference in gla_chunk_reference.cc. NaiveGla is the step-by-step
// recurrence that tests compare both against.
#pragma once

#include <torch/types.h>

namespace flame::worker::ops {

struct GlaOutput {
  torch::Tensor output;       // [B, T, H, V]
  torch::Tensor final_state;  // [N, H, K, V], undefined unless requested
};

// fla's chunk length for GLA.
inline constexpr int64_t kGlaChunkSize = 64;

GlaOutput ChunkGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const torch::Tensor& g, double scale, const torch::Tensor& initial_state = {},
                   bool output_final_state = false, const torch::Tensor& cu_seqlens = {});

// The recurrence above, one time step at a time (differentiable; slow; for tests).
GlaOutput NaiveGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const torch::Tensor& g, double scale, const torch::Tensor& initial_state = {},
                   bool output_final_state = false, const torch::Tensor& cu_seqlens = {});

// The chunked algorithm in plain ATen ops, for any device (what ChunkGla runs on CPU).
GlaOutput ChunkGlaReference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& g, double scale,
                            const torch::Tensor& initial_state, bool output_final_state,
                            const torch::Tensor& cu_seqlens);

}  // namespace flame::worker::ops
