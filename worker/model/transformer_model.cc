#include "worker/model/transformer_model.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/ops/attention.h"
#include "worker/ops/layer_ops.h"

namespace flame::worker::model {

AttentionImpl::AttentionImpl(const ModelConfig& config) : options_(config.transformer) {
  const int64_t d = config.hidden_size, kv_dim = options_.KvDim(d);
  head_dim_ = options_.HeadDim(d);
  // Registration order is fla's __init__ order: it fixes the draw order of the initialisation.
  q_proj_ = register_module("q_proj", MakeLinear(d, d, options_.qkv_bias));
  k_proj_ = register_module("k_proj", MakeLinear(d, kv_dim, options_.qkv_bias));
  v_proj_ = register_module("v_proj", MakeLinear(d, kv_dim, options_.qkv_bias));
  o_proj_ = register_module("o_proj", MakeLinear(d, d));
  if (options_.qk_norm) {
    q_norm_ = register_module("q_norm", RmsNorm(head_dim_, TransformerOptions::kQkNormEps));
    k_norm_ = register_module("k_norm", RmsNorm(head_dim_, TransformerOptions::kQkNormEps));
  }
}

torch::Tensor AttentionImpl::Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) {
  torch::Tensor q = q_proj_(x).unflatten(-1, {-1, head_dim_});        // [B, T, H, D]
  torch::Tensor k = k_proj_(x).unflatten(-1, {-1, head_dim_});        // [B, T, H_kv, D]
  const torch::Tensor v = v_proj_(x).unflatten(-1, {-1, head_dim_});  // [B, T, H_kv, D]
  if (options_.qk_norm) {
    q = q_norm_(q);
    k = k_norm_(k);
  }
  ops::RotaryOptions rotary;
  rotary.base = options_.rope_theta;
  q = ops::Rotary(q, rotary, cu_seqlens);
  k = ops::Rotary(k, rotary, cu_seqlens);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  const torch::Tensor o = ops::CausalAttention(q, k, v, scale, options_.window_size.value_or(0),
                                               cu_seqlens);  // [B, T, H, D]
  return o_proj_(o.flatten(-2));                             // [B, T, hidden]
}

std::shared_ptr<CausalLm> MakeTransformerLm(const ModelConfig& config) {
  return std::make_shared<DecoderLm>(config, [](const ModelConfig& c, int64_t /*layer_idx*/) {
    return std::make_shared<AttentionImpl>(c);
  });
}

}  // namespace flame::worker::model
