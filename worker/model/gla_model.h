// GLA as fla builds it (fla/models/gla/modeling_gla.py, fla/layers/gla.py), in LibTorch.
//
//   GlaForCausalLm          model.*, lm_head (absent when tie_word_embeddings: the logits use
//                           model.embeddings.weight)
//   GlaModel                embeddings, layers.{i}, norm
//   GlaBlock                attn_norm -> attn -> (+ residual) mlp_norm -> mlp -> (+ residual)
//   GatedLinearAttention    q_proj, k_proj, v_proj, [q/k/v_conv1d], gk_proj.{0,1}, [g_proj],
//                           g_norm_swish_gate | g_norm, o_proj
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>

#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

class GatedLinearAttentionImpl : public torch::nn::Module {
 public:
  GatedLinearAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cu_seqlens);

 private:
  // [B, T, H_kv * d] -> [B, T, H, d]: each key/value head serves num_heads / num_kv_heads query
  // heads, repeated in place like fla's einops repeat.
  torch::Tensor SplitHeads(const torch::Tensor& x, int64_t head_dim) const;
  torch::Tensor FeatureMap(const torch::Tensor& x) const;

  GlaOptions options_;
  int64_t head_k_dim_, head_v_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, g_proj_{nullptr};
  torch::nn::Linear o_proj_{nullptr};
  torch::nn::Sequential gk_proj_{nullptr};
  ShortConvolution q_conv1d_{nullptr}, k_conv1d_{nullptr}, v_conv1d_{nullptr};
  GatedRmsNorm gated_norm_{nullptr};  // use_output_gate
  RmsNorm norm_{nullptr};             // no output gate
};
TORCH_MODULE(GatedLinearAttention);

class GlaBlockImpl : public torch::nn::Module {
 public:
  explicit GlaBlockImpl(const ModelConfig& config);
  // h [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cu_seqlens);

 private:
  RmsNorm attn_norm_{nullptr}, mlp_norm_{nullptr};
  GatedLinearAttention attn_{nullptr};
  GatedMlp mlp_{nullptr};
};
TORCH_MODULE(GlaBlock);

class GlaModelImpl : public torch::nn::Module {
 public:
  explicit GlaModelImpl(const ModelConfig& config);
  // input_ids [B, T] -> final-normed hidden states [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens);

  torch::nn::Embedding embeddings{nullptr};

 private:
  torch::nn::ModuleList layers_{nullptr};
  RmsNorm norm_{nullptr};
};
TORCH_MODULE(GlaModel);

class GlaForCausalLm : public CausalLm {
 public:
  explicit GlaForCausalLm(const ModelConfig& config);
  CausalLmOutput Forward(const torch::Tensor& input_ids, const torch::Tensor& labels,
                         const torch::Tensor& cu_seqlens) override;

 private:
  GlaModel model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // null when tied
};

}  // namespace flame::worker::model
