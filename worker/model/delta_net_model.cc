#include "worker/model/delta_net_model.h"

#include <torch/torch.h>

#include <cmath>

#include "worker/ops/delta_rule.h"
#include "worker/ops/layer_ops.h"

namespace flame::worker::model {
namespace {

// fla's l2norm eps (inside the square root), as use_qk_l2norm_in_kernel applies it.
constexpr double kL2NormEps = 1e-6;

// fla's sum_norm: x / max(Σ|x|, 1e-6) over the last dimension (F.normalize with p = 1).
torch::Tensor SumNorm(const torch::Tensor& x) {
  return x / x.abs().sum(-1, /*keepdim=*/true).clamp_min(1e-6);
}

}  // namespace

// ---- DeltaNet ----------------------------------------------------------------------------------

DeltaNetAttentionImpl::DeltaNetAttentionImpl(const ModelConfig& config)
    : options_(config.delta_net) {
  const int64_t d = config.hidden_size, H = options_.num_heads;
  const int64_t key_dim = options_.KeyDim(d), value_dim = options_.ValueDim(d);
  head_k_dim_ = key_dim / H;
  head_v_dim_ = value_dim / H;

  // Registration order is fla's __init__ order: it fixes the draw order of the initialisation.
  q_proj_ = register_module("q_proj", MakeLinear(d, key_dim));
  k_proj_ = register_module("k_proj", MakeLinear(d, key_dim));
  v_proj_ = register_module("v_proj", MakeLinear(d, value_dim));
  if (options_.use_beta) b_proj_ = register_module("b_proj", MakeLinear(d, H));
  if (options_.use_short_conv) {
    // fla's q/k convolutions apply SiLU only when it is the qk activation; v's always does.
    const bool qk_silu = options_.qk_activation == "silu";
    const int64_t w = options_.conv_size;
    q_conv1d_ = register_module("q_conv1d", ShortConvolution(key_dim, w, false, qk_silu));
    k_conv1d_ = register_module("k_conv1d", ShortConvolution(key_dim, w, false, qk_silu));
    v_conv1d_ = register_module("v_conv1d", ShortConvolution(value_dim, w));
  }
  if (options_.use_gate) {
    g_proj_ = register_module("g_proj", MakeLinear(d, value_dim));
    gated_norm_ = register_module("o_norm", GatedRmsNorm(head_v_dim_, config.norm_eps));
  } else {
    norm_ = register_module("o_norm", RmsNorm(head_v_dim_, config.norm_eps));
  }
  o_proj_ = register_module("o_proj", MakeLinear(value_dim, d));
}

torch::Tensor DeltaNetAttentionImpl::QueryKeyFeatures(const torch::Tensor& x) const {
  torch::Tensor y = x;
  if (options_.qk_activation == "relu") y = torch::relu(y);
  if (options_.qk_activation == "elu") y = torch::elu(y) + 1;
  if (options_.qk_norm == "sum") y = SumNorm(y);
  if (options_.qk_norm == "l2") y = ops::L2Norm(y, kL2NormEps);
  return y;
}

torch::Tensor DeltaNetAttentionImpl::Mix(const torch::Tensor& x,
                                             const torch::Tensor& cu_seqlens) {
  torch::Tensor q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);  // [B, T, Dk | Dv]
  if (options_.use_short_conv) {
    q = q_conv1d_(q, cu_seqlens);
    k = k_conv1d_(k, cu_seqlens);
    v = v_conv1d_(v, cu_seqlens);
  } else {
    if (options_.qk_activation == "silu") {
      q = Swish(q);
      k = Swish(k);
    }
    v = Swish(v);
  }
  q = QueryKeyFeatures(q.unflatten(-1, {options_.num_heads, head_k_dim_}));  // [B, T, H, dk]
  k = QueryKeyFeatures(k.unflatten(-1, {options_.num_heads, head_k_dim_}));  // [B, T, H, dk]
  v = v.unflatten(-1, {options_.num_heads, head_v_dim_});                    // [B, T, H, dv]
  torch::Tensor beta = options_.use_beta ? torch::sigmoid(b_proj_(x))
                                         : torch::ones({x.size(0), x.size(1), options_.num_heads},
                                                       x.options());  // [B, T, H]
  if (options_.allow_neg_eigval) beta = beta * 2.0;

  const double scale = 1.0 / std::sqrt(static_cast<double>(head_k_dim_));
  torch::Tensor o = ops::ChunkDeltaRule(q, k, v, beta, scale, /*initial_state=*/{},
                                        /*output_final_state=*/false, cu_seqlens)
                        .output;  // [B, T, H, dv]
  if (options_.use_gate) {
    o = gated_norm_(o, g_proj_(x).unflatten(-1, {options_.num_heads, head_v_dim_}));
  } else {
    o = norm_(o);
  }
  return o_proj_(o.flatten(-2));  // [B, T, hidden]
}

// ---- Gated DeltaNet ----------------------------------------------------------------------------

GatedDeltaNetAttentionImpl::GatedDeltaNetAttentionImpl(const ModelConfig& config)
    : options_(config.gated_deltanet) {
  const int64_t d = config.hidden_size, HV = options_.NumValueHeads();
  const int64_t key_dim = options_.KeyDim(), value_dim = options_.ValueDim();
  q_proj_ = register_module("q_proj", MakeLinear(d, key_dim));
  k_proj_ = register_module("k_proj", MakeLinear(d, key_dim));
  v_proj_ = register_module("v_proj", MakeLinear(d, value_dim));
  a_proj_ = register_module("a_proj", MakeLinear(d, HV));
  b_proj_ = register_module("b_proj", MakeLinear(d, HV));
  A_log = register_parameter("A_log", torch::zeros({HV}));
  dt_bias = register_parameter("dt_bias", torch::zeros({HV}));
  if (options_.use_short_conv) {
    const int64_t w = options_.conv_size;
    q_conv1d_ = register_module("q_conv1d", ShortConvolution(key_dim, w));
    k_conv1d_ = register_module("k_conv1d", ShortConvolution(key_dim, w));
    v_conv1d_ = register_module("v_conv1d", ShortConvolution(value_dim, w));
  }
  const int64_t head_v_dim = options_.HeadVDim();
  if (options_.use_gate) {
    g_proj_ = register_module("g_proj", MakeLinear(d, value_dim));
  }
  if (options_.use_gate && options_.output_gate_activation != "sigmoid") {
    gated_norm_ = register_module("o_norm", GatedRmsNorm(head_v_dim, config.norm_eps));
  } else {
    norm_ = register_module("o_norm", RmsNorm(head_v_dim, config.norm_eps));
  }
  o_proj_ = register_module("o_proj", MakeLinear(value_dim, d));
}

void GatedDeltaNetAttentionImpl::InitCustomParameters(at::Generator& generator) {
  torch::NoGradGuard no_grad;
  const double dt_min = 1e-3, dt_max = 0.1, dt_floor = 1e-4;
  A_log.uniform_(0.0, 16.0, generator).log_();
  torch::Tensor dt = torch::empty_like(dt_bias).uniform_(0.0, 1.0, generator);
  dt =
      torch::exp(dt * (std::log(dt_max) - std::log(dt_min)) + std::log(dt_min)).clamp_min(dt_floor);
  dt_bias.copy_(dt + torch::log(-torch::expm1(-dt)));  // softplus⁻¹(dt)
}

torch::Tensor GatedDeltaNetAttentionImpl::Mix(const torch::Tensor& x,
                                                  const torch::Tensor& cu_seqlens) {
  const int64_t H = options_.num_heads, HV = options_.NumValueHeads();
  torch::Tensor q = q_proj_(x), k = k_proj_(x), v = v_proj_(x);  // [B, T, Dk | Dv]
  if (options_.use_short_conv) {
    q = q_conv1d_(q, cu_seqlens);
    k = k_conv1d_(k, cu_seqlens);
    v = v_conv1d_(v, cu_seqlens);
  } else {
    q = Swish(q);
    k = Swish(k);
    v = Swish(v);
  }
  q = ops::L2Norm(q.unflatten(-1, {H, options_.head_dim}), kL2NormEps);  // [B, T, H, dk]
  k = ops::L2Norm(k.unflatten(-1, {H, options_.head_dim}), kL2NormEps);  // [B, T, H, dk]
  v = v.unflatten(-1, {HV, options_.HeadVDim()});                        // [B, T, HV, dv]
  // Grouped value heads: value head i reads query/key head i / (HV / H), as fla's kernels.
  q = RepeatKvHeads(q, HV / H);  // [B, T, HV, dk]
  k = RepeatKvHeads(k, HV / H);
  torch::Tensor beta = torch::sigmoid(b_proj_(x));  // [B, T, HV]
  if (options_.allow_neg_eigval) beta = beta * 2.0;
  // Log decay in float32, as fla's gate kernel: g = −exp(A_log) · softplus(a + dt_bias) <= 0.
  const torch::ScalarType gate_type =
      x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const torch::Tensor g = -torch::exp(A_log.to(gate_type)) *
                          torch::softplus(a_proj_(x).to(gate_type) + dt_bias.to(gate_type));

  const double scale = 1.0 / std::sqrt(static_cast<double>(options_.head_dim));
  torch::Tensor o = ops::ChunkGatedDeltaRule(q, k, v, g, beta, scale, /*initial_state=*/{},
                                             /*output_final_state=*/false, cu_seqlens)
                        .output;  // [B, T, HV, dv]
  if (options_.use_gate) {
    const torch::Tensor gate = g_proj_(x).unflatten(-1, {HV, options_.HeadVDim()});
    o = gated_norm_ ? gated_norm_(o, gate) : norm_(o) * torch::sigmoid(gate);
  } else {
    o = norm_(o);
  }
  return o_proj_(o.flatten(-2));  // [B, T, hidden]
}

std::shared_ptr<CausalLm> MakeDeltaNetLm(const ModelConfig& config) {
  TORCH_CHECK(
      config.family == ModelFamily::kDeltaNet || config.family == ModelFamily::kGatedDeltaNet,
      "MakeDeltaNetLm builds delta_net and gated_deltanet, not ", config.model_type);
  return std::make_shared<DecoderLm>(
      config, [](const ModelConfig& c, int64_t /*layer_idx*/) -> std::shared_ptr<SequenceMixer> {
        if (c.family == ModelFamily::kGatedDeltaNet) {
          return std::make_shared<GatedDeltaNetAttentionImpl>(c);
        }
        return std::make_shared<DeltaNetAttentionImpl>(c);
      });
}

}  // namespace flame::worker::model
