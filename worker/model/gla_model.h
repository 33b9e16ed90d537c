// GLA as fla builds it (fla/models/gla/modeling_gla.py, fla/layers/gla.py), in LibTorch: the
// shared decoder skeleton (decoder_lm.h: model.embeddings, model.layers.{i}.{attn_norm, attn,
// mlp_norm, mlp}, model.norm, lm_head) with gated linear attention in every block's `attn` slot:
//
//   GatedLinearAttention    q_proj, k_proj, v_proj, [q/k/v_conv1d], gk_proj.{0,1}, [g_proj],
//                           g_norm_swish_gate | g_norm, o_proj
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <memory>

#include "worker/config/model_config.h"
#include "worker/model/decoder_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

class GatedLinearAttentionImpl : public SequenceMixer {
 public:
  explicit GatedLinearAttentionImpl(const ModelConfig& config);
  // x [B, T, hidden] -> [B, T, hidden]
  torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) override;

 private:
  // [B, T, H_kv * d] -> [B, T, H, d]: each key/value head serves num_heads / num_kv_heads query
  // heads, repeated in place like fla's einops repeat.
  torch::Tensor SplitHeads(const torch::Tensor& x, int64_t head_dim) const;

  GlaOptions options_;
  int64_t head_k_dim_, head_v_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, g_proj_{nullptr};
  torch::nn::Linear o_proj_{nullptr};
  torch::nn::Sequential gk_proj_{nullptr};
  ShortConvolution q_conv1d_{nullptr}, k_conv1d_{nullptr}, v_conv1d_{nullptr};
  GatedRmsNorm gated_norm_{nullptr};  // use_output_gate
  RmsNorm norm_{nullptr};             // no output gate
};

// GLAForCausalLM (config.family == kGla), not yet initialised.
std::shared_ptr<CausalLm> MakeGlaLm(const ModelConfig& config);

}  // namespace flame::worker::model
