// Causal softmax attention, the contract of flash-attn's flash_attn_func / flash_attn_varlen_func
// with causal=True that fla's transformer layer (fla/layers/attn.py) calls.
//
//   q        [B, T, H, D]
//   k        [B, T, H_kv, D]     H_kv divides H; query head h reads key/value head h / (H / H_kv)
//   v        [B, T, H_kv, Dv]
//   output   [B, T, H, Dv],  o_i = Σ_j softmax_j(scale · q_i·k_j) v_j over the keys j that i sees:
//            j <= i, and i - j < window_size when window_size > 0 (flash-attn's window
//            (window_size - 1, 0)); with cu_seqlens (int64 [N + 1], B == 1) only keys of i's own
//            packed sequence.
// The output has q's dtype; the arithmetic is float32 (float64 for float64 inputs).
//
// Today every device runs the reference: ATen's scaled_dot_product_attention once per packed
// sequence (so no T x T mask is built across sequences), with an explicit band mask only when
// there is a window. It is differentiable through ATen's own backward.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace flame::worker::ops {

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double scale, int64_t window_size = 0,
                              const torch::Tensor& cu_seqlens = {});

}  // namespace flame::worker::ops
