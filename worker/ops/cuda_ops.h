// The CUDA paths of the ops (gated_chunk_cuda.cc, delta_rule_cuda.cc, layer_ops_cuda.cc), for the
// entry points in this folder only. They exist in FLAME_CUDA builds (FLAME_WITH_CUDA defined by
// flame::torch_cuda).
//
// Each takes the entry point's arguments with at least one CUDA tensor among them, checks devices
// and shapes with TORCH_CHECK (an error in the caller's arguments throws), and returns nullopt
// when the kernel cannot take arguments that the reference can (float64, a dimension that is not
// a multiple of what the kernel tiles by, ...), after a warning that says why, once per op. The
// entry point then runs the ATen reference, on the GPU.
#pragma once

#ifdef FLAME_WITH_CUDA

#include <torch/types.h>

#include <optional>

#include "worker/ops/delta_rule.h"
#include "worker/ops/gla.h"
#include "worker/ops/layer_ops.h"

namespace flame::worker::ops::cuda {

std::optional<GlaOutput> ChunkGla(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& g, double scale,
                                  const torch::Tensor& initial_state, bool output_final_state,
                                  const torch::Tensor& cu_seqlens);

std::optional<GlaOutput> ChunkSimpleGla(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& g_gamma, double scale,
                                        const torch::Tensor& initial_state, bool output_final_state,
                                        const torch::Tensor& cu_seqlens);

std::optional<DeltaRuleOutput> ChunkDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                              const torch::Tensor& v, const torch::Tensor& beta,
                                              double scale, const torch::Tensor& initial_state,
                                              bool output_final_state,
                                              const torch::Tensor& cu_seqlens);

std::optional<DeltaRuleOutput> ChunkGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& v, const torch::Tensor& g,
                                                   const torch::Tensor& beta, double scale,
                                                   const torch::Tensor& initial_state,
                                                   bool output_final_state,
                                                   const torch::Tensor& cu_seqlens);

std::optional<RmsNormOutput> RmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                     const torch::Tensor& weight, const torch::Tensor& gate,
                                     double eps);

std::optional<torch::Tensor> CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                          int64_t ignore_index, bool inplace_backward);

std::optional<torch::Tensor> LinearCrossEntropy(const torch::Tensor& hidden,
                                                const torch::Tensor& weight,
                                                const torch::Tensor& labels, int64_t ignore_index);

std::optional<torch::Tensor> ShortConv(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& bias, bool silu,
                                       const torch::Tensor& cu_seqlens);

std::optional<torch::Tensor> L2Norm(const torch::Tensor& x, double eps);

std::optional<torch::Tensor> Rotary(const torch::Tensor& x, const RotaryOptions& options,
                                    const torch::Tensor& cu_seqlens);

std::optional<torch::Tensor> SwiGlu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace flame::worker::ops::cuda

#endif  // FLAME_WITH_CUDA
