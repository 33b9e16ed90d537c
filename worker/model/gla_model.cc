#include "worker/model/gla_model.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/ops/gla.h"

namespace flame::worker::model {

GatedLinearAttentionImpl::GatedLinearAttentionImpl(const ModelConfig& config)
    : options_(config.gla) {
  const int64_t d = config.hidden_size;
  const int64_t key_dim = options_.KeyDim(d), value_dim = options_.ValueDim(d);
  const int64_t groups = options_.num_heads / options_.num_kv_heads;
  head_k_dim_ = key_dim / options_.num_heads;
  head_v_dim_ = value_dim / options_.num_heads;

  // Registration order is fla's __init__ order: it fixes the draw order of the initialisation.
  q_proj_ = register_module("q_proj", MakeLinear(d, key_dim));
  k_proj_ = register_module("k_proj", MakeLinear(d, key_dim / groups));
  v_proj_ = register_module("v_proj", MakeLinear(d, value_dim / groups));
  if (options_.use_output_gate) g_proj_ = register_module("g_proj", MakeLinear(d, value_dim));
  if (options_.use_short_conv) {
    q_conv1d_ = register_module("q_conv1d", ShortConvolution(key_dim, options_.conv_size));
    k_conv1d_ = register_module("k_conv1d", ShortConvolution(key_dim / groups, options_.conv_size));
    v_conv1d_ =
        register_module("v_conv1d", ShortConvolution(value_dim / groups, options_.conv_size));
  }
  // Low-rank gate: d -> 16 (no bias) -> key dim (bias), parameters gk_proj.0.*, gk_proj.1.*.
  gk_proj_ = register_module(
      "gk_proj", torch::nn::Sequential(MakeLinear(d, options_.gate_low_rank_dim),
                                       MakeLinear(options_.gate_low_rank_dim, key_dim / groups,
                                                  /*bias=*/true)));
  o_proj_ = register_module("o_proj", MakeLinear(value_dim, d));
  // fla names the output norm after its implementation: the fused norm+swish-gate kernel when
  // fuse_norm is on and there is a gate, a plain (float32) RMSNorm otherwise.
  if (options_.use_output_gate && config.fuse_norm) {
    gated_norm_ = register_module("g_norm_swish_gate", GatedRmsNorm(head_v_dim_, config.norm_eps,
                                                                    options_.elementwise_affine));
  } else {
    norm_ = register_module("g_norm",
                            RmsNorm(head_v_dim_, config.norm_eps, options_.elementwise_affine));
  }
}

torch::Tensor GatedLinearAttentionImpl::SplitHeads(const torch::Tensor& x, int64_t head_dim) const {
  return RepeatKvHeads(x.unflatten(-1, {-1, head_dim}), options_.num_heads / options_.num_kv_heads);
}

torch::Tensor GatedLinearAttentionImpl::Mix(const torch::Tensor& x,
                                            const torch::Tensor& cu_seqlens) {
  torch::Tensor q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);  // [B, T, Dk | Dv]
  if (options_.use_short_conv) {
    q = q_conv1d_(q, cu_seqlens);
    k = k_conv1d_(k, cu_seqlens);
    v = v_conv1d_(v, cu_seqlens);
  }
  q = ApplyFeatureMap(q.unflatten(-1, {options_.num_heads, head_k_dim_}),
                      options_.feature_map);                              // [B, T, H, dk]
  k = ApplyFeatureMap(SplitHeads(k, head_k_dim_), options_.feature_map);  // [B, T, H, dk]
  v = SplitHeads(v, head_v_dim_);                                         // [B, T, H, dv]
  // Per-channel log decay in (-inf, 0], softened by fla's fixed gate_logit_normalizer (16).
  torch::Tensor gk = torch::log_sigmoid(SplitHeads(gk_proj_->forward(x), head_k_dim_)) /
                     static_cast<double>(options_.gate_logit_normalizer);  // [B, T, H, dk]
  if (options_.clamp_min) gk = torch::clamp_min(gk, *options_.clamp_min);

  const double scale = 1.0 / std::sqrt(static_cast<double>(head_k_dim_));
  torch::Tensor o = ops::ChunkGla(q, k, v, gk, scale, /*initial_state=*/{},
                                  /*output_final_state=*/false, cu_seqlens)
                        .output;  // [B, T, H, dv]
  if (options_.use_output_gate) {
    const torch::Tensor gate = g_proj_(x).unflatten(-1, {options_.num_heads, head_v_dim_});
    o = gated_norm_ ? gated_norm_(o, gate) : norm_(o) * Swish(gate);
  } else {
    o = norm_(o);
  }
  return o_proj_(o.flatten(-2));  // [B, T, hidden]
}

std::shared_ptr<CausalLm> MakeGlaLm(const ModelConfig& config) {
  return std::make_shared<DecoderLm>(config, [](const ModelConfig& c, int64_t /*layer_idx*/) {
    return std::make_shared<GatedLinearAttentionImpl>(c);
  });
}

}  // namespace flame::worker::model
