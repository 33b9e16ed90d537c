// Options of the two delta-rule families, with fla's config field names and defaults
// (fla/models/delta_net/configuration_delta_net.py, fla/models/gated_deltanet/
// configuration_gated_deltanet.py). Parsed and validated by delta_net_config.cc; the fields every
// family shares (hidden_size, norm_eps, ...) live in ModelConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace flame::worker {

// DeltaNet (fla/layers/delta_net.py): S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ.
struct DeltaNetOptions {
  std::string attn_mode = "chunk";  // chunk | fused_recurrent: the same function
  int64_t num_heads = 16;
  double expand_k = 1.0;
  double expand_v = 1.0;
  bool use_beta = true;   // false: β = 1
  bool use_gate = false;  // output gate g_proj with a gated RMSNorm
  bool use_short_conv = true;
  int64_t conv_size = 4;
  bool allow_neg_eigval = false;  // β ∈ (0, 2)
  // Accepted for fla's configs; fla's layer always normalises its output (o_norm), whatever this
  // says, and so does ours.
  bool use_output_norm = true;
  std::string qk_activation = "silu";  // silu | relu | elu (elu + 1) | identity
  std::string qk_norm = "l2";          // l2 | sum

  // round(hidden · expand_k), round(hidden · expand_v); the parser checks they are integers.
  int64_t KeyDim(int64_t hidden_size) const;
  int64_t ValueDim(int64_t hidden_size) const;
};

// Gated DeltaNet (fla/layers/gated_deltanet.py):
// S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, log α_t = −exp(A_log)·softplus(a_t +
// dt_bias).
struct GatedDeltaNetOptions {
  std::string attn_mode = "chunk";     // chunk | fused_recurrent: the same function
  int64_t head_dim = 256;              // key dim per head
  int64_t num_heads = 6;               // query/key heads
  std::optional<int64_t> num_v_heads;  // null -> num_heads; more: grouped value heads (GVA)
  double expand_v = 2.0;               // value dim per head = head_dim · expand_v
  bool use_gate = true;
  bool use_short_conv = true;
  int64_t conv_size = 4;
  bool allow_neg_eigval = false;
  std::string output_gate_activation = "swish";  // swish | silu (the same) | sigmoid

  int64_t NumValueHeads() const { return num_v_heads.value_or(num_heads); }
  int64_t HeadVDim() const;                                          // int(head_dim · expand_v)
  int64_t KeyDim() const { return num_heads * head_dim; }            // q, k width
  int64_t ValueDim() const { return NumValueHeads() * HeadVDim(); }  // v, g, o width
};

}  // namespace flame::worker
