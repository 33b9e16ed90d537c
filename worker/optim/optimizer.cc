#include "worker/optim/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <tuple>

namespace flame::worker {

std::unique_ptr<torch::optim::Optimizer> BuildOptimizer(const OptimizerConfig& config,
                                                        const std::vector<torch::Tensor>& params) {
  const std::tuple<double, double> betas = {config.beta1, config.beta2};
  if (config.name == "Adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(config.lr)
                                                            .betas(betas)
                                                            .eps(config.eps)
                                                            .weight_decay(config.weight_decay));
  }
  TORCH_CHECK(config.name == "AdamW", "optimizer.name must be AdamW or Adam, got ", config.name);
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(config.lr)
                                                           .betas(betas)
                                                           .eps(config.eps)
                                                           .weight_decay(config.weight_decay));
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    group.options().set_lr(lr);
  }
}

double ClipGradNorm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().detach().to(torch::kFloat64).norm());
  }
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm().item<double>();
  // torch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  if (max_norm > 0 && std::isfinite(total)) {
    const double coefficient = max_norm / (total + 1e-6);
    if (coefficient < 1.0) {
      for (const torch::Tensor& p : params) {
        if (p.grad().defined()) p.grad().mul_(coefficient);
      }
    }
  }
  return total;
}

}  // namespace flame::worker
