// DeltaNet and Gated DeltaNet as fla builds them (fla/models/delta_net, fla/models/gated_deltanet,
// fla/layers/delta_net.py, fla/layers/gated_deltanet.py), in LibTorch: the shared decoder
// skeleton (decoder_lm.h) with one of two mixers in every block's `attn` slot:
//
//   DeltaNetAttention     q_proj, k_proj, v_proj, [b_proj], [q/k/v_conv1d], [g_proj], o_norm,
//                         o_proj                                          (model_type delta_net)
//   GatedDeltaNetAttention q_proj, k_proj, v_proj, a_proj, b_proj, A_log, dt_bias,
//                         [q/k/v_conv1d], [g_proj], o_norm, o_proj   (model_type gated_deltanet)
#pragma once

#include <memory>

#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"
#include "worker/model/decoder_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

// fla's DeltaNet layer.
class DeltaNetAttentionImpl : public SequenceMixer {
 public:
  explicit DeltaNetAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) override;

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

// fla's GatedDeltaNet layer. A_log and dt_bias are drawn in InitCustomParameters, as fla's layer
// draws them in its constructor: A = U(0, 16), dt = exp(U(ln 1e-3, ln 0.1)) clamped at 1e-4,
// A_log = ln A, dt_bias = softplus⁻¹(dt).
class GatedDeltaNetAttentionImpl : public SequenceMixer, public CustomInitModule {
 public:
  explicit GatedDeltaNetAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) override;
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
// DeltaNetForCausalLM or GatedDeltaNetForCausalLM (config.family kDeltaNet or kGatedDeltaNet),
// not yet initialised.
std::shared_ptr<CausalLm> MakeDeltaNetLm(const ModelConfig& config);

}  // namespace flame::worker::model
