// DeltaNet and Gated DeltaNet as fla builds them (fla/models/delta_net, fla/models/gated_deltanet,
// fla/layers/delta_net.py, fla/layers/gated_deltanet.py), in LibTorch. Both families share fla's
// block skeleton; only the mixer (`attn`) differs:
//
//   DeltaNetForCausalLm   model.*, lm_head (absent when tie_word_embeddings)
//   DeltaNetModel         embeddings, layers.{i}, norm
//   DeltaNetBlock         attn_norm -> attn -> (+ residual) mlp_norm -> mlp -> (+ residual)
//   DeltaNetAttention     q_proj, k_proj, v_proj, [b_proj], [q/k/v_conv1d], [g_proj], o_norm,
//                         o_proj                                          (model_type delta_net)
//   GatedDeltaNetAttention q_proj, k_proj, v_proj, a_proj, b_proj, A_log, dt_bias,
//                         [q/k/v_conv1d], [g_proj], o_norm, o_proj   (model_type gated_deltanet)
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

// fla's DeltaNet layer.
class DeltaNetAttentionImpl : public torch::nn::Module {
 public:
  explicit DeltaNetAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cu_seqlens);

 private:
  // qk_activation (after the convolution, which applies SiLU itself) and qk_norm 'sum'; 'l2'
  // happens right before the op. x [B, T, H, dk].
  torch::Tensor QueryKeyFeatures(const torch::Tensor& x) const;

  DeltaNetOptions options_;
  int64_t head_k_dim_, head_v_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, b_proj_{nullptr};
  torch::nn::Linear g_proj_{nullptr}, o_proj_{nullptr};
  ShortConvolution q_conv1d_{nullptr}, k_conv1d_{nullptr}, v_conv1d_{nullptr};
  GatedRmsNorm gated_norm_{nullptr};  // use_gate
  RmsNorm norm_{nullptr};             // no gate
};
TORCH_MODULE(DeltaNetAttention);

// fla's GatedDeltaNet layer. A_log and dt_bias are drawn in InitCustomParameters, as fla's layer
// draws them in its constructor: A = U(0, 16), dt = exp(U(ln 1e-3, ln 0.1)) clamped at 1e-4,
// A_log = ln A, dt_bias = softplus⁻¹(dt).
class GatedDeltaNetAttentionImpl : public torch::nn::Module, public CustomInitModule {
 public:
  explicit GatedDeltaNetAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cu_seqlens);
  void InitCustomParameters(at::Generator& generator) override;

  torch::Tensor A_log;    // [HV]
  torch::Tensor dt_bias;  // [HV]

 private:
  GatedDeltaNetOptions options_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, a_proj_{nullptr};
  torch::nn::Linear b_proj_{nullptr}, g_proj_{nullptr}, o_proj_{nullptr};
  ShortConvolution q_conv1d_{nullptr}, k_conv1d_{nullptr}, v_conv1d_{nullptr};
  GatedRmsNorm gated_norm_{nullptr};  // use_gate with a swish gate
  RmsNorm norm_{nullptr};             // no gate, or a sigmoid gate
};
TORCH_MODULE(GatedDeltaNetAttention);

class DeltaNetBlockImpl : public torch::nn::Module {
 public:
  explicit DeltaNetBlockImpl(const ModelConfig& config);
  // h [B, T, hidden] -> [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cu_seqlens);

 private:
  RmsNorm attn_norm_{nullptr}, mlp_norm_{nullptr};
  DeltaNetAttention delta_{nullptr};       // delta_net
  GatedDeltaNetAttention gated_{nullptr};  // gated_deltanet
  GatedMlp mlp_{nullptr};
};
TORCH_MODULE(DeltaNetBlock);

class DeltaNetModelImpl : public torch::nn::Module {
 public:
  explicit DeltaNetModelImpl(const ModelConfig& config);
  // input_ids [B, T] -> final-normed hidden states [B, T, hidden]
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens);

  torch::nn::Embedding embeddings{nullptr};

 private:
  torch::nn::ModuleList layers_{nullptr};
  RmsNorm norm_{nullptr};
};
TORCH_MODULE(DeltaNetModel);

// The causal LM of both families (config.family kDeltaNet or kGatedDeltaNet).
class DeltaNetForCausalLm : public CausalLm {
 public:
  explicit DeltaNetForCausalLm(const ModelConfig& config);
  CausalLmOutput Forward(const torch::Tensor& input_ids, const torch::Tensor& labels,
                         const torch::Tensor& cu_seqlens) override;

 private:
  DeltaNetModel model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // null when tied
};

}  // namespace flame::worker::model
