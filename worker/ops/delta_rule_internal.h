// Pieces shared by the delta-rule algorithms in this folder (not part of the op's interface).
#pragma once

#include <torch/types.h>

#include <functional>

#include "worker/ops/delta_rule.h"

namespace flame::worker::ops::internal {

// Throws c10::Error naming the offending argument and its shape. g may be undefined (the
// ungated rule); `op` names the op in the message.
void CheckDeltaRuleArguments(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& g,
                             const torch::Tensor& beta, const torch::Tensor& initial_state,
                             const torch::Tensor& cu_seqlens);

// An algorithm over one dense [B, T, H, *] problem: (q, k, v, g, beta, scale, initial_state,
// output_final_state); g may be undefined.
using DenseDeltaRule = std::function<DeltaRuleOutput(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
    const torch::Tensor&, double, const torch::Tensor&, bool)>;

// Runs `dense` once per sequence of cu_seqlens (or once when it is undefined) and concatenates.
DeltaRuleOutput SplitDeltaRuleSequences(const DenseDeltaRule& dense, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& g, const torch::Tensor& beta,
                                        double scale, const torch::Tensor& initial_state,
                                        bool output_final_state, const torch::Tensor& cu_seqlens);

}  // namespace flame::worker::ops::internal
