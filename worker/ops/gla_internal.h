// Pieces shared by the GLA algorithms in this folder (not part of the op's interface).
#pragma once

#include <torch/types.h>

#include <functional>

#include "worker/ops/gla.h"

namespace flame::worker::ops::internal {

// Throws c10::Error naming the offending argument and its shape.
void CheckGlaArguments(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& g, const torch::Tensor& initial_state,
                       const torch::Tensor& cu_seqlens);

// float64 stays float64 (tests); everything else computes in float32.
torch::ScalarType ComputeType(const torch::Tensor& q);

// An algorithm over one dense [B, T, H, *] problem.
using DenseGla =
    std::function<GlaOutput(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                            const torch::Tensor&, double, const torch::Tensor&, bool)>;

// Runs `dense` once per sequence of cu_seqlens (or once when it is undefined) and concatenates.
GlaOutput SplitSequences(const DenseGla& dense, const torch::Tensor& q, const torch::Tensor& k,
                         const torch::Tensor& v, const torch::Tensor& g, double scale,
                         const torch::Tensor& initial_state, bool output_final_state,
                         const torch::Tensor& cu_seqlens);

// Checks simple GLA's gate (g [B, T, H] xor g_gamma [H]) and returns it broadcast to q's
// [B, T, H, K]: the per-channel gate the GLA reference takes. g_gamma is detached (a constant).
torch::Tensor SimpleGlaChannelGate(const torch::Tensor& q, const torch::Tensor& g,
                                   const torch::Tensor& g_gamma);

}  // namespace flame::worker::ops::internal
