#include "worker/model/layers.h"

#include <torch/torch.h>

#include <vector>

namespace flame::worker::model {
namespace {

// x · rsqrt(mean(x²) + eps) in float32 (float64 inputs stay float64, for gradient checks).
torch::Tensor Normalize(const torch::Tensor& x, double eps) {
  const torch::Tensor xf =
      x.to(x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32);
  return xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

}  // namespace

torch::Tensor Swish(const torch::Tensor& x) { return x * torch::sigmoid(x); }

torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps, bool elementwise_affine) : eps_(eps) {
  if (elementwise_affine) weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = Normalize(x, eps_);
  if (weight.defined()) y = y * weight;
  return y.to(x.scalar_type());
}

GatedRmsNormImpl::GatedRmsNormImpl(int64_t dim, double eps, bool elementwise_affine) : eps_(eps) {
  if (elementwise_affine) weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor GatedRmsNormImpl::forward(const torch::Tensor& x, const torch::Tensor& gate) {
  torch::Tensor y = Normalize(x, eps_);
  if (weight.defined()) y = y * weight;
  return (y * Swish(gate.to(y.scalar_type()))).to(x.scalar_type());
}

GatedMlpImpl::GatedMlpImpl(int64_t hidden_size, int64_t intermediate_size) {
  gate_proj_ = register_module("gate_proj", MakeLinear(hidden_size, intermediate_size));
  up_proj_ = register_module("up_proj", MakeLinear(hidden_size, intermediate_size));
  down_proj_ = register_module("down_proj", MakeLinear(intermediate_size, hidden_size));
}

torch::Tensor GatedMlpImpl::forward(const torch::Tensor& x) {
  return down_proj_(Swish(gate_proj_(x)) * up_proj_(x));
}

ShortConvolutionImpl::ShortConvolutionImpl(int64_t channels, int64_t kernel_size, bool bias,
                                           bool silu)
    : kernel_size_(kernel_size), silu_(silu) {
  weight = register_parameter("weight", torch::zeros({channels, 1, kernel_size}));
  if (bias) this->bias = register_parameter("bias", torch::zeros({channels}));
}

torch::Tensor ShortConvolutionImpl::Convolve(const torch::Tensor& x) {
  // [B, T, D] -> [B, D, T], left-pad W - 1 steps so that output t sees inputs t-W+1 .. t.
  const int64_t T = x.size(1);
  const torch::Tensor y = torch::conv1d(x.transpose(1, 2), weight, bias, /*stride=*/1,
                                        /*padding=*/kernel_size_ - 1, /*dilation=*/1,
                                        /*groups=*/x.size(2));
  const torch::Tensor causal = y.narrow(2, 0, T).transpose(1, 2);
  return silu_ ? Swish(causal) : causal;
}

torch::Tensor ShortConvolutionImpl::forward(const torch::Tensor& x,
                                            const torch::Tensor& cu_seqlens) {
  if (!cu_seqlens.defined()) return Convolve(x);
  const torch::Tensor bounds = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* at = bounds.data_ptr<int64_t>();
  std::vector<torch::Tensor> parts;
  for (int64_t n = 0; n + 1 < bounds.size(0); ++n) {
    parts.push_back(Convolve(x.narrow(1, at[n], at[n + 1] - at[n])));
  }
  return torch::cat(parts, 1);
}

torch::Tensor RepeatKvHeads(const torch::Tensor& x, int64_t groups) {
  return groups == 1 ? x : x.repeat_interleave(groups, /*dim=*/2);
}

torch::Tensor ApplyFeatureMap(const torch::Tensor& x, const std::string& name) {
  if (name == "relu") return torch::relu(x);
  if (name == "swish" || name == "silu") return Swish(x);
  if (name == "sigmoid") return torch::sigmoid(x);
  return x;
}

}  // namespace flame::worker::model
