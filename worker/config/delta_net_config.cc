#include "worker/config/delta_net_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/config/config_fields.h"

namespace flame::worker {
namespace {

using internal::FieldReader;

// fla's layers run `chunk` in training whatever the config says; `fused_recurrent` computes the
// same function, so both are accepted. `fused_chunk` raises in fla.
absl::Status CheckAttnMode(const FieldReader& r, const std::string& mode) {
  if (mode == "chunk" || mode == "fused_recurrent") return absl::OkStatus();
  if (mode == "fused_chunk") {
    return r.Error("attn_mode", "fused_chunk is deprecated in fla; use chunk");
  }
  return r.Error("attn_mode", absl::StrCat("\"", mode, "\" is not chunk or fused_recurrent"));
}

// hidden · expand must be a whole number of features that splits evenly into heads.
absl::Status CheckWidth(const FieldReader& r, const std::string& key, int64_t hidden_size,
                        double expand, int64_t heads) {
  const double width = static_cast<double>(hidden_size) * expand;
  const double rounded = std::round(width);
  if (std::abs(width - rounded) > 1e-9 * std::max(1.0, width)) {
    return r.Error(
        key, absl::StrCat("gives hidden_size * ", key, " = ", width, ", which is not an integer"));
  }
  const auto dim = static_cast<int64_t>(rounded);
  if (dim <= 0 || dim % heads != 0) {
    return r.Error(key,
                   absl::StrCat("gives a dim of ", dim,
                                ", which must be a positive multiple of num_heads (", heads, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckOneOf(const FieldReader& r, const std::string& key, const std::string& value,
                        std::initializer_list<const char*> allowed) {
  std::string names;
  for (const char* name : allowed) {
    if (value == name) return absl::OkStatus();
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  return r.Error(key, absl::StrCat("\"", value, "\" is not supported (", names, ")"));
}

double ConvFlops(bool use_short_conv, int64_t conv_size, int64_t channels) {
  return use_short_conv ? 2.0 * static_cast<double>(conv_size * channels) : 0.0;
}

// MLP and lm_head, the parts every block-structured family shares.
double MlpFlops(const ModelConfig& c) {
  return 2.0 * 3.0 * static_cast<double>(c.hidden_size * c.MlpIntermediateSize());
}

double LmHeadFlops(const ModelConfig& c) {
  return 2.0 * static_cast<double>(c.hidden_size * c.vocab_size);
}

}  // namespace

int64_t DeltaNetOptions::KeyDim(int64_t hidden_size) const {
  return static_cast<int64_t>(std::round(static_cast<double>(hidden_size) * expand_k));
}

int64_t DeltaNetOptions::ValueDim(int64_t hidden_size) const {
  return static_cast<int64_t>(std::round(static_cast<double>(hidden_size) * expand_v));
}

int64_t GatedDeltaNetOptions::HeadVDim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * expand_v);
}

absl::Status ParseDeltaNetOptions(const FieldReader& r, ModelConfig* c) {
  DeltaNetOptions& o = c->delta_net;
  FLAME_RETURN_IF_ERROR(r.String("attn_mode", &o.attn_mode));
  FLAME_RETURN_IF_ERROR(r.Int("num_heads", &o.num_heads));
  FLAME_RETURN_IF_ERROR(r.Number("expand_k", &o.expand_k));
  FLAME_RETURN_IF_ERROR(r.Number("expand_v", &o.expand_v));
  FLAME_RETURN_IF_ERROR(r.Bool("use_beta", &o.use_beta));
  FLAME_RETURN_IF_ERROR(r.Bool("use_gate", &o.use_gate));
  FLAME_RETURN_IF_ERROR(r.Bool("use_short_conv", &o.use_short_conv));
  FLAME_RETURN_IF_ERROR(r.Int("conv_size", &o.conv_size));
  FLAME_RETURN_IF_ERROR(r.Bool("allow_neg_eigval", &o.allow_neg_eigval));
  FLAME_RETURN_IF_ERROR(r.Bool("use_output_norm", &o.use_output_norm));
  FLAME_RETURN_IF_ERROR(r.String("qk_activation", &o.qk_activation));
  FLAME_RETURN_IF_ERROR(r.String("qk_norm", &o.qk_norm));

  FLAME_RETURN_IF_ERROR(CheckAttnMode(r, o.attn_mode));
  FLAME_RETURN_IF_ERROR(r.Positive("num_heads", static_cast<double>(o.num_heads)));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_k", o.expand_k));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_v", o.expand_v));
  FLAME_RETURN_IF_ERROR(r.Positive("conv_size", static_cast<double>(o.conv_size)));
  FLAME_RETURN_IF_ERROR(CheckWidth(r, "expand_k", c->hidden_size, o.expand_k, o.num_heads));
  FLAME_RETURN_IF_ERROR(CheckWidth(r, "expand_v", c->hidden_size, o.expand_v, o.num_heads));
  FLAME_RETURN_IF_ERROR(
      CheckOneOf(r, "qk_activation", o.qk_activation, {"silu", "relu", "elu", "identity"}));
  FLAME_RETURN_IF_ERROR(CheckOneOf(r, "qk_norm", o.qk_norm, {"l2", "sum"}));
  return absl::OkStatus();
}

absl::Status ParseGatedDeltaNetOptions(const FieldReader& r, ModelConfig* c) {
  GatedDeltaNetOptions& o = c->gated_deltanet;
  // GatedDeltaNetConfig's depth default differs from the other families'.
  if (!r.IsSet("num_hidden_layers")) c->num_hidden_layers = 21;
  FLAME_RETURN_IF_ERROR(r.String("attn_mode", &o.attn_mode));
  FLAME_RETURN_IF_ERROR(r.Int("head_dim", &o.head_dim));
  FLAME_RETURN_IF_ERROR(r.Int("num_heads", &o.num_heads));
  FLAME_RETURN_IF_ERROR(r.OptionalInt("num_v_heads", &o.num_v_heads));
  FLAME_RETURN_IF_ERROR(r.Number("expand_v", &o.expand_v));
  FLAME_RETURN_IF_ERROR(r.Bool("use_gate", &o.use_gate));
  FLAME_RETURN_IF_ERROR(r.Bool("use_short_conv", &o.use_short_conv));
  FLAME_RETURN_IF_ERROR(r.Int("conv_size", &o.conv_size));
  FLAME_RETURN_IF_ERROR(r.Bool("allow_neg_eigval", &o.allow_neg_eigval));
  FLAME_RETURN_IF_ERROR(r.String("output_gate_activation", &o.output_gate_activation));

  FLAME_RETURN_IF_ERROR(CheckAttnMode(r, o.attn_mode));
  FLAME_RETURN_IF_ERROR(r.Positive("head_dim", static_cast<double>(o.head_dim)));
  FLAME_RETURN_IF_ERROR(r.Positive("num_heads", static_cast<double>(o.num_heads)));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_v", o.expand_v));
  FLAME_RETURN_IF_ERROR(r.Positive("conv_size", static_cast<double>(o.conv_size)));
  if (o.num_v_heads) {
    FLAME_RETURN_IF_ERROR(r.Positive("num_v_heads", static_cast<double>(*o.num_v_heads)));
    // Each value head reads the query/key head i / (num_v_heads / num_heads), as fla's kernels.
    if (*o.num_v_heads % o.num_heads != 0) {
      return r.Error("num_v_heads",
                     absl::StrCat("must be a multiple of num_heads (", o.num_heads, ")"));
    }
  }
  const double head_v_dim = static_cast<double>(o.head_dim) * o.expand_v;
  if (head_v_dim != std::floor(head_v_dim)) {
    return r.Error("expand_v", absl::StrCat("gives head_dim * expand_v = ", head_v_dim,
                                            ", which is not an integer"));
  }
  FLAME_RETURN_IF_ERROR(CheckOneOf(r, "output_gate_activation", o.output_gate_activation,
                                   {"swish", "silu", "sigmoid"}));
  return absl::OkStatus();
}

double DeltaRuleForwardFlopsPerToken(int64_t key_dim, int64_t value_dim) {
  const double C = 64, K = static_cast<double>(key_dim), V = static_cast<double>(value_dim);
  return 6 * K * V + C * (6 * K + 4 * V) + C * C / 3;
}

double DeltaNetTrainingFlopsPerToken(const ModelConfig& c) {
  const DeltaNetOptions& o = c.delta_net;
  const double d = static_cast<double>(c.hidden_size);
  const int64_t key_dim = o.KeyDim(c.hidden_size), value_dim = o.ValueDim(c.hidden_size);
  const double dk = static_cast<double>(key_dim), dv = static_cast<double>(value_dim);
  double layer = 2 * d * (2 * dk + dv) + 2 * dv * d;                  // q, k, v in; o out
  if (o.use_beta) layer += 2 * d * static_cast<double>(o.num_heads);  // b_proj
  if (o.use_gate) layer += 2 * d * dv;                                // g_proj
  layer += ConvFlops(o.use_short_conv, o.conv_size, 2 * key_dim + value_dim);
  layer += static_cast<double>(o.num_heads) *
           DeltaRuleForwardFlopsPerToken(key_dim / o.num_heads, value_dim / o.num_heads);
  layer += MlpFlops(c);
  return 3 * (static_cast<double>(c.num_hidden_layers) * layer + LmHeadFlops(c));
}

double GatedDeltaNetTrainingFlopsPerToken(const ModelConfig& c) {
  const GatedDeltaNetOptions& o = c.gated_deltanet;
  const double d = static_cast<double>(c.hidden_size);
  const double dk = static_cast<double>(o.KeyDim()), dv = static_cast<double>(o.ValueDim());
  const double value_heads = static_cast<double>(o.NumValueHeads());
  double layer = 2 * d * (2 * dk + dv) + 2 * dv * d;  // q, k, v in; o out
  layer += 2 * 2 * d * value_heads;                   // a_proj, b_proj
  if (o.use_gate) layer += 2 * d * dv;                // g_proj
  layer += ConvFlops(o.use_short_conv, o.conv_size, 2 * o.KeyDim() + o.ValueDim());
  layer += value_heads * DeltaRuleForwardFlopsPerToken(o.head_dim, o.HeadVDim());
  layer += MlpFlops(c);
  return 3 * (static_cast<double>(c.num_hidden_layers) * layer + LmHeadFlops(c));
}

}  // namespace flame::worker
