#include "worker/model/retnet_model.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/ops/layer_ops.h"
#include "worker/ops/retention.h"

namespace flame::worker::model {

MultiScaleRetentionImpl::MultiScaleRetentionImpl(const ModelConfig& config)
    : options_(config.retnet) {
  const int64_t d = config.hidden_size;
  const int64_t key_dim = options_.KeyDim(d), value_dim = options_.ValueDim(d);
  const int64_t groups = options_.num_heads / options_.num_kv_heads;
  head_k_dim_ = options_.HeadKeyDim(d);
  head_v_dim_ = options_.HeadValueDim(d);

  // Registration order is fla's __init__ order: it fixes the draw order of the initialisation.
  q_proj_ = register_module("q_proj", MakeLinear(d, key_dim));
  k_proj_ = register_module("k_proj", MakeLinear(d, key_dim / groups));
  v_proj_ = register_module("v_proj", MakeLinear(d, value_dim / groups));
  if (options_.use_output_gate) g_proj_ = register_module("g_proj", MakeLinear(d, value_dim));
  o_proj_ = register_module("o_proj", MakeLinear(value_dim, d));
  if (options_.use_output_gate && config.fuse_norm) {
    gated_norm_ = register_module("g_norm_swish_gate", GatedRmsNorm(head_v_dim_, config.norm_eps,
                                                                    options_.elementwise_affine));
  } else {
    norm_ = register_module("g_norm",
                            RmsNorm(head_v_dim_, config.norm_eps, options_.elementwise_affine));
  }
}

torch::Tensor MultiScaleRetentionImpl::SplitHeads(const torch::Tensor& x, int64_t head_dim) const {
  return RepeatKvHeads(x.unflatten(-1, {-1, head_dim}), options_.num_heads / options_.num_kv_heads);
}

torch::Tensor MultiScaleRetentionImpl::Mix(const torch::Tensor& x,
                                           const torch::Tensor& cu_seqlens) {
  torch::Tensor q = ApplyFeatureMap(q_proj_(x).unflatten(-1, {-1, head_k_dim_}),
                                    options_.feature_map);  // [B, T, H, dk]
  torch::Tensor k = ApplyFeatureMap(k_proj_(x).unflatten(-1, {-1, head_k_dim_}),
                                    options_.feature_map);  // [B, T, H_kv, dk]
  // fla's RotaryEmbedding(dim=dk) keeps its default base; it rotates k before the head repeat.
  const ops::RotaryOptions rotary;
  q = ops::Rotary(q, rotary, cu_seqlens);
  k = ops::Rotary(k, rotary, cu_seqlens);
  k = RepeatKvHeads(k, options_.num_heads / options_.num_kv_heads);  // [B, T, H, dk]
  const torch::Tensor v = SplitHeads(v_proj_(x), head_v_dim_);       // [B, T, H, dv]

  const double scale = 1.0 / std::sqrt(static_cast<double>(head_k_dim_));
  torch::Tensor o = ops::ChunkRetention(q, k, v, scale, /*initial_state=*/{},
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

std::shared_ptr<CausalLm> MakeRetNetLm(const ModelConfig& config) {
  return std::make_shared<DecoderLm>(config, [](const ModelConfig& c, int64_t /*layer_idx*/) {
    return std::make_shared<MultiScaleRetentionImpl>(c);
  });
}

}  // namespace flame::worker::model
