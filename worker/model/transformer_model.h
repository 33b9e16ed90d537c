// fla's transformer baseline (fla/models/transformer, fla/layers/attn.py), in LibTorch: the
// shared decoder skeleton (decoder_lm.h) with softmax attention in every block's `attn` slot.
//
//   Attention   q_proj [hidden -> hidden], k_proj, v_proj [hidden -> kv_heads · head_dim]
//               (biases with qkv_bias), [q_norm, k_norm: per-head RMSNorm with qk_norm], o_proj
//               [hidden -> hidden, no bias]; head_dim = hidden / num_heads.
//
// RoPE is rotate-half (fla's RotaryEmbedding is not interleaved) with base rope_theta over the
// whole head dim, and restarts at every packed sequence's start, as flash-attn's varlen path
// does there.
#pragma once

#include <memory>

#include "worker/config/model_config.h"
#include "worker/model/decoder_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

class AttentionImpl : public SequenceMixer {
 public:
  explicit AttentionImpl(const ModelConfig& config);
  torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) override;

 private:
  TransformerOptions options_;
  int64_t head_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  RmsNorm q_norm_{nullptr}, k_norm_{nullptr};  // qk_norm only
};

// TransformerForCausalLM (config.family == kTransformer), not yet initialised.
std::shared_ptr<CausalLm> MakeTransformerLm(const ModelConfig& config);

}  // namespace flame::worker::model
