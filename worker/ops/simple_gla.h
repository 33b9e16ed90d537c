// Simple GLA: linear attention with one decay per head and token, fla's `chunk_simple_gla`
// contract; RetNet's retention is the constant-decay case (g_gamma[h] = log(1 - 2^(-5-h))).
//
//   S_t = exp(g_t) S_{t-1} + k_t v_tᵀ        S: [K, V] per head
//   o_t = S_tᵀ (scale · q_t)
//
// Layout [B, T, H, D], as gla.h:
//   q, k     [B, T, H, K]        v  [B, T, H, V]
//   g        [B, T, H]           natural-log decay (<= 0), per head and token, or undefined
//   g_gamma  [H]                 constant natural-log decay per head, or undefined
//   exactly one of g and g_gamma is given; g_gamma gets no gradient (it is a constant).
//   initial_state / final_state  [N, H, K, V] float32 (float64 for float64 inputs)
//   cu_seqlens  int64 [N + 1] (packed varlen, B == 1)
//
// On CUDA tensors ChunkSimpleGla runs kernels/simple_gla (bf16 q, k, v; fp32 gates and states)
// inside a torch::autograd::Function; on CPU, and for shapes the kernel cannot take, the
// differentiable ATen reference: the per-channel GLA algorithm with g broadcast over K (autograd
// sums the broadcast back into dg).
#pragma once

#include <torch/types.h>

#include "worker/ops/gla.h"

namespace flame::worker::ops {

GlaOutput ChunkSimpleGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& g, const torch::Tensor& g_gamma, double scale,
                         const torch::Tensor& initial_state = {}, bool output_final_state = false,
                         const torch::Tensor& cu_seqlens = {});

// The reference ChunkSimpleGla runs on CPU (any device; differentiable).
GlaOutput ChunkSimpleGlaReference(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& g,
                                  const torch::Tensor& g_gamma, double scale,
                                  const torch::Tensor& initial_state, bool output_final_state,
                                  const torch::Tensor& cu_seqlens);

}  // namespace flame::worker::ops
