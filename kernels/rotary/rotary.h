// Rotary position embedding (rotate-half, non-interleaved), forward and backward, for q and k of
// the RetNet and transformer layers. For feature pairs (i, i + R/2), i < R/2, of the first R =
// rotary_dim features of every head:
//   theta_i = position * inv_freq_i,   inv_freq_i = 1 / base^(2i / R)          (fp32, as fla)
//   y_i = x_i cos(theta_i) - x_{i+R/2} sin(theta_i),   y_{i+R/2} = x_{i+R/2} cos + x_i sin.
// The backward is the same rotation by -theta (RotaryBackward with x = dy, y = dx). Features past
// R pass through. Positions count from 0 at the start of each sequence: B dense sequences of
// seq_len tokens, or packed sequences given by cu_seqlens; position_offset is added (decoding).
//
// x and y are (tokens, H, D) bf16 with token and head strides in elements (0: contiguous); y may
// be x (in place). R must be a multiple of 16 and at most D, D a multiple of 8, pointers and
// strides 16-byte aligned; otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

struct RotaryParams {
  const __nv_bfloat16* x = nullptr;  // (tokens, H, D)
  __nv_bfloat16* y = nullptr;        // (tokens, H, D), may equal x
  int64_t tokens = 0;                // B * seq_len, or the packed length with cu_seqlens
  int heads = 0;                     // H
  int head_dim = 0;                  // D
  int rotary_dim = 0;                // R; 0 means D
  int64_t x_token_stride = 0, x_head_stride = 0, y_token_stride = 0, y_head_stride = 0;
  // Positions: with cu_seqlens (device int32 [num_seqs + 1], strictly increasing, starting at 0),
  // token t of sequence n has position t - cu_seqlens[n]; tokens past cu_seqlens[num_seqs] count
  // from there. Without it, position t % seq_len.
  int seq_len = 0;
  const int32_t* cu_seqlens = nullptr;
  int num_seqs = 0;
  int position_offset = 0;
  float base = 10000.0f;
};

cudaError_t RotaryForward(const RotaryParams& params, cudaStream_t stream);
// Rotation by -theta: the gradient of the forward (pass dy as x and dx as y).
cudaError_t RotaryBackward(const RotaryParams& params, cudaStream_t stream);

}  // namespace flame::kernels
