// AdamW / Adam as flame builds them (torch.optim with lr, betas, eps, weight_decay; one
// parameter group, so weight decay applies to every parameter, norms and embeddings included),
// plus global-norm gradient clipping.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "worker/config/train_config.h"

namespace flame::worker {

// AdamW decouples weight decay (p -= lr·wd·p); Adam adds wd·p to the gradient (L2), as torch.
std::unique_ptr<torch::optim::Optimizer> BuildOptimizer(const OptimizerConfig& config,
                                                        const std::vector<torch::Tensor>& params);

// Sets the LR of every parameter group (the schedule's value for the coming step).
void SetLearningRate(torch::optim::Optimizer& optimizer, double lr);

// The L2 norm of all gradients together, before clipping; scales the gradients down to
// max_norm when the norm exceeds it (max_norm 0: measure only). A NaN/Inf norm is returned as
// is, so that the caller can skip the step.
double ClipGradNorm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace flame::worker
