// fla's RetNet (fla/models/retnet, fla/layers/multiscale_retention.py), in LibTorch: the shared
// decoder skeleton (decoder_lm.h) with multi-scale retention in every block's `attn` slot.
//
//   MultiScaleRetention   q_proj [hidden -> Dk], k_proj [hidden -> Dk / g],
//                         v_proj [hidden -> Dv / g], [g_proj: hidden -> Dv, with use_output_gate],
//                         o_proj [Dv -> hidden],
//                         g_norm_swish_gate | g_norm [per-head RMSNorm over dv]
//   Dk = int(hidden · expand_k), Dv = int(hidden · expand_v), g = num_heads / num_kv_heads,
//   dk = Dk / num_heads, dv = Dv / num_heads.
//
// q and k get RoPE (rotate-half, base 10000, over dk), then the retention of ops/retention.h with
// scale dk^-½; the output is RMSNorm(o)·w·swish(g_proj(x)) per head (or RMSNorm(o)·w without the
// gate), then o_proj. fla names the norm after its implementation: g_norm_swish_gate when
// fuse_norm and the output gate are both on, g_norm otherwise; the arithmetic is the same.
#pragma once

#include <memory>

#include "worker/config/model_config.h"
#include "worker/model/decoder_lm.h"
#include "worker/model/layers.h"

namespace flame::worker::model {

class MultiScaleRetentionImpl : public SequenceMixer {
 public:
  explicit MultiScaleRetentionImpl(const ModelConfig& config);
  torch::Tensor Mix(const torch::Tensor& x, const torch::Tensor& cu_seqlens) override;

 private:
  // [B, T, H_kv · d] -> [B, T, H, d]: each key/value head serves num_heads / num_kv_heads query
  // heads, repeated in place (fla's einops repeat '... h d -> ... (h g) d').
  torch::Tensor SplitHeads(const torch::Tensor& x, int64_t head_dim) const;

  RetNetOptions options_;
  int64_t head_k_dim_, head_v_dim_;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, g_proj_{nullptr};
  torch::nn::Linear o_proj_{nullptr};
  GatedRmsNorm gated_norm_{nullptr};  // fuse_norm with the output gate
  RmsNorm norm_{nullptr};             // otherwise
};

// RetNetForCausalLM (config.family == kRetNet), not yet initialised.
std::shared_ptr<CausalLm> MakeRetNetLm(const ModelConfig& config);

}  // namespace flame::worker::model
