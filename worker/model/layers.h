// Building blocks shared by the fla model families, with fla's parameter names so that a
// state dict exports to safetensors without renames:
//   RmsNorm               "weight"                             (fla RMSNorm / nn.RMSNorm)
//   GatedRmsNorm          "weight"                             (fla FusedRMSNormGated, swish gate)
//   GatedMlp              gate_proj, up_proj, down_proj        (fla GatedMLP, SwiGLU)
//   ShortConvolution      "weight" [D, 1, W] (+ "bias")        (fla ShortConvolution, SiLU)
// Norm arithmetic is float32 whatever the input dtype, like fla's kernels.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace flame::worker::model {

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps, bool elementwise_affine = true);
  // x [..., D] -> [..., D]
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // [D], undefined without elementwise_affine

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

class GatedRmsNormImpl : public torch::nn::Module {
 public:
  GatedRmsNormImpl(int64_t dim, double eps, bool elementwise_affine = true);
  // RMSNorm(x) · weight · swish(gate); x, gate [..., D]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& gate);

  torch::Tensor weight;  // [D]

 private:
  double eps_;
};
TORCH_MODULE(GatedRmsNorm);

class GatedMlpImpl : public torch::nn::Module {
 public:
  GatedMlpImpl(int64_t hidden_size, int64_t intermediate_size);
  // down(swish(gate(x)) · up(x)); x [..., hidden]
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};
TORCH_MODULE(GatedMlp);

// Depthwise causal Conv1d over time followed by SiLU (unless `silu` is false: fla's activation
// None); with cu_seqlens the convolution restarts at every sequence start (nothing leaks across
// packed documents).
class ShortConvolutionImpl : public torch::nn::Module {
 public:
  ShortConvolutionImpl(int64_t channels, int64_t kernel_size, bool bias = false, bool silu = true);
  // x [B, T, D] -> [B, T, D]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cu_seqlens = {});

  torch::Tensor weight;  // [D, 1, W]
  torch::Tensor bias;    // [D] or undefined

 private:
  torch::Tensor Convolve(const torch::Tensor& x);
  int64_t kernel_size_;
  bool silu_;
};
TORCH_MODULE(ShortConvolution);

// x ⊙ sigmoid(x)
torch::Tensor Swish(const torch::Tensor& x);

// [B, T, H_kv, d] -> [B, T, H_kv · groups, d]: each key/value head serves `groups` consecutive
// query heads (fla's einops repeat '... h d -> ... (h g) d').
torch::Tensor RepeatKvHeads(const torch::Tensor& x, int64_t groups);

// fla's layer feature maps by name: "" (none), relu, swish or silu, sigmoid. Each family's config
// parser decides which names it accepts.
torch::Tensor ApplyFeatureMap(const torch::Tensor& x, const std::string& name);

// Linear without bias (the projections of every fla layer).
torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias = false);

}  // namespace flame::worker::model
