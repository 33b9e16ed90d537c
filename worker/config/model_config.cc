#include "worker/config/model_config.h"

#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/config/config_fields.h"
#include "worker/config/delta_net_config.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;
using internal::FieldReader;

absl::Status ParseCommon(const FieldReader& r, ModelConfig* c) {
  FLAME_RETURN_IF_ERROR(r.Int("hidden_size", &c->hidden_size));
  FLAME_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c->num_hidden_layers));
  FLAME_RETURN_IF_ERROR(r.Int("vocab_size", &c->vocab_size));
  FLAME_RETURN_IF_ERROR(r.Number("hidden_ratio", &c->hidden_ratio));
  FLAME_RETURN_IF_ERROR(r.OptionalInt("intermediate_size", &c->intermediate_size));
  FLAME_RETURN_IF_ERROR(r.Number("norm_eps", &c->norm_eps));
  FLAME_RETURN_IF_ERROR(r.Number("initializer_range", &c->initializer_range));
  FLAME_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c->tie_word_embeddings));
  FLAME_RETURN_IF_ERROR(r.Int("bos_token_id", &c->bos_token_id));
  FLAME_RETURN_IF_ERROR(r.Int("eos_token_id", &c->eos_token_id));
  FLAME_RETURN_IF_ERROR(r.OptionalInt("pad_token_id", &c->pad_token_id));
  FLAME_RETURN_IF_ERROR(r.Bool("fuse_norm", &c->fuse_norm));

  FLAME_RETURN_IF_ERROR(r.Positive("hidden_size", c->hidden_size));
  FLAME_RETURN_IF_ERROR(r.Positive("num_hidden_layers", c->num_hidden_layers));
  FLAME_RETURN_IF_ERROR(r.Positive("vocab_size", c->vocab_size));
  FLAME_RETURN_IF_ERROR(r.Positive("hidden_ratio", c->hidden_ratio));
  FLAME_RETURN_IF_ERROR(r.Positive("norm_eps", c->norm_eps));
  if (c->intermediate_size)
    FLAME_RETURN_IF_ERROR(r.Positive("intermediate_size", *c->intermediate_size));
  if (c->initializer_range < 0) return r.Error("initializer_range", "must not be negative");
  if (c->pad_token_id && (*c->pad_token_id < 0 || *c->pad_token_id >= c->vocab_size)) {
    return r.Error("pad_token_id", "must be a token id below vocab_size");
  }

  // Settings that change the computation and that flame-worker does not implement yet.
  std::string hidden_act = "swish";
  FLAME_RETURN_IF_ERROR(r.String("hidden_act", &hidden_act));
  if (hidden_act != "swish") return r.Error("hidden_act", "must be \"swish\" (fla's GatedMLP)");
  if (r.IsSet("attn")) return r.Error("attn", "(hybrid attention layers) is not supported yet");
  if (r.IsSet("attnres_block_size")) {
    return r.Error("attnres_block_size", "(attention residuals) is not supported yet");
  }
  bool flag = false;
  FLAME_RETURN_IF_ERROR(r.Bool("use_l2warp", &flag));
  if (flag) return r.Error("use_l2warp", "is not supported yet");
  bool fuse_ce = true, fuse_linear_ce = false;
  FLAME_RETURN_IF_ERROR(r.Bool("fuse_cross_entropy", &fuse_ce));
  FLAME_RETURN_IF_ERROR(r.Bool("fuse_linear_cross_entropy", &fuse_linear_ce));
  if (fuse_ce && fuse_linear_ce) {
    return r.Error("fuse_linear_cross_entropy", "and fuse_cross_entropy cannot both be true");
  }
  for (const char* key : {"fuse_swiglu", "use_cache", "use_gk", "use_gv"}) {
    FLAME_RETURN_IF_ERROR(r.Bool(key, &flag));  // accepted; type-checked only
  }
  return absl::OkStatus();
}

absl::Status ParseGla(const FieldReader& r, ModelConfig* c) {
  GlaOptions& g = c->gla;
  FLAME_RETURN_IF_ERROR(r.Int("num_heads", &g.num_heads));
  g.num_kv_heads = g.num_heads;
  FLAME_RETURN_IF_ERROR(r.Int("num_kv_heads", &g.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Number("expand_k", &g.expand_k));
  FLAME_RETURN_IF_ERROR(r.Number("expand_v", &g.expand_v));
  FLAME_RETURN_IF_ERROR(r.String("feature_map", &g.feature_map));
  FLAME_RETURN_IF_ERROR(r.Bool("use_short_conv", &g.use_short_conv));
  FLAME_RETURN_IF_ERROR(r.Int("conv_size", &g.conv_size));
  FLAME_RETURN_IF_ERROR(r.Bool("use_output_gate", &g.use_output_gate));
  FLAME_RETURN_IF_ERROR(r.Bool("elementwise_affine", &g.elementwise_affine));
  FLAME_RETURN_IF_ERROR(r.OptionalNumber("clamp_min", &g.clamp_min));
  std::string attn_mode = "chunk";
  FLAME_RETURN_IF_ERROR(r.String("attn_mode", &attn_mode));
  // The three modes compute the same function; they differ only in which kernel runs.
  if (attn_mode != "chunk" && attn_mode != "fused_recurrent" && attn_mode != "fused_chunk") {
    return r.Error("attn_mode", "must be chunk, fused_recurrent or fused_chunk");
  }

  FLAME_RETURN_IF_ERROR(r.Positive("num_heads", g.num_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("num_kv_heads", g.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_k", g.expand_k));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_v", g.expand_v));
  FLAME_RETURN_IF_ERROR(r.Positive("conv_size", g.conv_size));
  if (g.num_heads % g.num_kv_heads != 0) {
    return r.Error("num_kv_heads", absl::StrCat("must divide num_heads (", g.num_heads, ")"));
  }
  const int64_t key_dim = g.KeyDim(c->hidden_size), value_dim = g.ValueDim(c->hidden_size);
  if (key_dim <= 0 || key_dim % g.num_heads != 0) {
    return r.Error("expand_k", absl::StrCat("gives a key dim of ", key_dim,
                                            ", which must be a positive multiple of num_heads"));
  }
  if (value_dim <= 0 || value_dim % g.num_heads != 0) {
    return r.Error("expand_v", absl::StrCat("gives a value dim of ", value_dim,
                                            ", which must be a positive multiple of num_heads"));
  }
  if (!g.feature_map.empty() && g.feature_map != "relu" && g.feature_map != "swish" &&
      g.feature_map != "sigmoid") {
    return r.Error("feature_map", absl::StrCat("\"", g.feature_map,
                                               "\" is not supported (null, relu, swish, sigmoid)"));
  }
  return absl::OkStatus();
}

absl::Status ParseTransformer(const FieldReader& r, ModelConfig* c) {
  TransformerOptions& t = c->transformer;
  FLAME_RETURN_IF_ERROR(r.Int("num_heads", &t.num_heads));
  t.num_kv_heads = t.num_heads;
  FLAME_RETURN_IF_ERROR(r.Int("num_kv_heads", &t.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Bool("qkv_bias", &t.qkv_bias));
  FLAME_RETURN_IF_ERROR(r.Bool("qk_norm", &t.qk_norm));
  FLAME_RETURN_IF_ERROR(r.OptionalInt("window_size", &t.window_size));
  FLAME_RETURN_IF_ERROR(r.Number("rope_theta", &t.rope_theta));
  FLAME_RETURN_IF_ERROR(r.Int("max_position_embeddings", &t.max_position_embeddings));
  // fla's Attention always applies RoPE: a null base would fail there too.
  if (r.IsNull("rope_theta")) return r.Error("rope_theta", "must be a number, not null");
  // flame's configs carry HF's attention_bias, which TransformerConfig never reads (its switch
  // is qkv_bias): false is what fla does; true would silently do nothing, so it is refused.
  bool attention_bias = false;
  FLAME_RETURN_IF_ERROR(r.Bool("attention_bias", &attention_bias));
  if (attention_bias) {
    return r.Error("attention_bias", "is not read by fla's transformer; use qkv_bias instead");
  }
  bool elementwise_affine = true;  // in TransformerConfig, but no transformer layer reads it
  FLAME_RETURN_IF_ERROR(r.Bool("elementwise_affine", &elementwise_affine));

  FLAME_RETURN_IF_ERROR(r.Positive("num_heads", t.num_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("num_kv_heads", t.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("rope_theta", t.rope_theta));
  FLAME_RETURN_IF_ERROR(r.Positive("max_position_embeddings", t.max_position_embeddings));
  if (t.window_size) FLAME_RETURN_IF_ERROR(r.Positive("window_size", *t.window_size));
  if (t.num_heads % t.num_kv_heads != 0) {
    return r.Error("num_kv_heads", absl::StrCat("must divide num_heads (", t.num_heads, ")"));
  }
  if (c->hidden_size % t.num_heads != 0) {
    return r.Error("num_heads", absl::StrCat("must divide hidden_size (", c->hidden_size, ")"));
  }
  if (t.HeadDim(c->hidden_size) % 2 != 0) {
    return r.Error("num_heads", absl::StrCat("gives a head dim of ", t.HeadDim(c->hidden_size),
                                             ", which must be even for RoPE"));
  }
  return absl::OkStatus();
}

absl::Status ParseRetNet(const FieldReader& r, ModelConfig* c) {
  RetNetOptions& o = c->retnet;
  // RetNetConfig's MLP default is hidden_ratio 2; an explicit null reaches fla's GatedMLP, whose
  // own default (4, already in ModelConfig) applies.
  if (!r.IsSet("hidden_ratio") && !r.IsNull("hidden_ratio")) c->hidden_ratio = 2;
  FLAME_RETURN_IF_ERROR(r.Int("num_heads", &o.num_heads));
  o.num_kv_heads = o.num_heads;
  FLAME_RETURN_IF_ERROR(r.Int("num_kv_heads", &o.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Number("expand_k", &o.expand_k));
  FLAME_RETURN_IF_ERROR(r.Number("expand_v", &o.expand_v));
  FLAME_RETURN_IF_ERROR(r.String("feature_map", &o.feature_map));
  FLAME_RETURN_IF_ERROR(r.Bool("use_output_gate", &o.use_output_gate));
  FLAME_RETURN_IF_ERROR(r.Bool("elementwise_affine", &o.elementwise_affine));
  int64_t max_position_embeddings = 2048, conv_size = 4;  // read by no RetNet layer
  FLAME_RETURN_IF_ERROR(r.Int("max_position_embeddings", &max_position_embeddings));
  FLAME_RETURN_IF_ERROR(r.Int("conv_size", &conv_size));
  std::string attn_mode = "chunk";
  FLAME_RETURN_IF_ERROR(r.String("attn_mode", &attn_mode));
  // All four modes compute the same retention; they differ only in which kernel runs.
  if (attn_mode != "chunk" && attn_mode != "fused_chunk" && attn_mode != "parallel" &&
      attn_mode != "fused_recurrent") {
    return r.Error("attn_mode", "must be chunk, fused_chunk, parallel or fused_recurrent");
  }
  // RetNetConfig has use_short_conv, but fla's RetNetBlock does not hand it to the layer, so an
  // fla RetNet never has a short convolution. Refused rather than silently ignored.
  bool use_short_conv = false;
  FLAME_RETURN_IF_ERROR(r.Bool("use_short_conv", &use_short_conv));
  if (use_short_conv) {
    return r.Error("use_short_conv",
                   "has no effect in fla's RetNet (the block never passes it to the layer); "
                   "remove it or set it to false");
  }

  FLAME_RETURN_IF_ERROR(r.Positive("num_heads", o.num_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("num_kv_heads", o.num_kv_heads));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_k", o.expand_k));
  FLAME_RETURN_IF_ERROR(r.Positive("expand_v", o.expand_v));
  if (o.num_heads % o.num_kv_heads != 0) {
    return r.Error("num_kv_heads", absl::StrCat("must divide num_heads (", o.num_heads, ")"));
  }
  const int64_t key_dim = o.KeyDim(c->hidden_size), value_dim = o.ValueDim(c->hidden_size);
  if (key_dim <= 0 || key_dim % o.num_heads != 0) {
    return r.Error("expand_k", absl::StrCat("gives a key dim of ", key_dim,
                                            ", which must be a positive multiple of num_heads"));
  }
  if (value_dim <= 0 || value_dim % o.num_heads != 0) {
    return r.Error("expand_v", absl::StrCat("gives a value dim of ", value_dim,
                                            ", which must be a positive multiple of num_heads"));
  }
  const int64_t head_k_dim = o.HeadKeyDim(c->hidden_size);
  if (head_k_dim % 2 != 0 || head_k_dim > RetNetOptions::kMaxHeadKeyDim) {
    return r.Error("expand_k", absl::StrCat("gives a head key dim of ", head_k_dim,
                                            ", which must be even (RoPE) and at most ",
                                            RetNetOptions::kMaxHeadKeyDim));
  }
  if (!o.feature_map.empty() && o.feature_map != "relu" && o.feature_map != "swish" &&
      o.feature_map != "silu" && o.feature_map != "sigmoid") {
    return r.Error("feature_map", absl::StrCat("\"", o.feature_map,
                                               "\" is not supported (null, relu, swish, silu, "
                                               "sigmoid)"));
  }
  return absl::OkStatus();
}

struct FamilyEntry {
  ModelFamily family;
  std::function<absl::Status(const FieldReader&, ModelConfig*)> parse;
};

// model_type -> parser. Families of flame's configs that are not built yet are named in the
// error so that users see "not yet" rather than "unknown".
const std::map<std::string, FamilyEntry>& Families() {
  static const auto* families = new std::map<std::string, FamilyEntry>{
      {"gla", {ModelFamily::kGla, ParseGla}},
      {"transformer", {ModelFamily::kTransformer, ParseTransformer}},
      {"retnet", {ModelFamily::kRetNet, ParseRetNet}},
      {"delta_net", {ModelFamily::kDeltaNet, ParseDeltaNetOptions}},
      {"gated_deltanet", {ModelFamily::kGatedDeltaNet, ParseGatedDeltaNetOptions}},
  };
  return *families;
}

}  // namespace

int64_t GlaOptions::KeyDim(int64_t hidden_size) const {
  return static_cast<int64_t>(static_cast<double>(hidden_size) * expand_k);
}

int64_t GlaOptions::ValueDim(int64_t hidden_size) const {
  return static_cast<int64_t>(static_cast<double>(hidden_size) * expand_v);
}

int64_t ModelConfig::MlpIntermediateSize() const {
  if (intermediate_size) return *intermediate_size;
  const auto base = static_cast<int64_t>(static_cast<double>(hidden_size) * hidden_ratio * 2 / 3);
  return 256 * ((base + 255) / 256);
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source) {
  Json root = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON object"));
  }
  FieldReader reader(root, source);
  ModelConfig config;
  FLAME_RETURN_IF_ERROR(reader.String("model_type", &config.model_type));
  if (config.model_type.empty()) return reader.Error("model_type", "is required");
  const auto it = Families().find(config.model_type);
  if (it == Families().end()) {
    std::string supported;
    for (const auto& family : Families()) absl::StrAppend(&supported, " ", family.first);
    return reader.Error("model_type", absl::StrCat("\"", config.model_type,
                                                   "\" is unknown (supported:", supported, ")"));
  }
  config.family = it->second.family;
  FLAME_RETURN_IF_ERROR(ParseCommon(reader, &config));
  FLAME_RETURN_IF_ERROR(it->second.parse(reader, &config));
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  FLAME_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseModelConfig(text, path);
}

std::string DescribeModelConfig(const ModelConfig& c) {
  std::string text = absl::StrCat(c.model_type, ": hidden ", c.hidden_size, ", ",
                                  c.num_hidden_layers, " layers, vocab ", c.vocab_size, ", mlp ",
                                  c.MlpIntermediateSize(), ", tied ", c.tie_word_embeddings);
  if (c.family == ModelFamily::kGla) {
    absl::StrAppend(&text, ", heads ", c.gla.num_heads, ", key dim ", c.gla.KeyDim(c.hidden_size),
                    ", value dim ", c.gla.ValueDim(c.hidden_size));
  }
  if (c.family == ModelFamily::kTransformer) {
    absl::StrAppend(&text, ", heads ", c.transformer.num_heads, " (kv ", c.transformer.num_kv_heads,
                    "), head dim ", c.transformer.HeadDim(c.hidden_size), ", rope theta ",
                    c.transformer.rope_theta);
    if (c.transformer.window_size) absl::StrAppend(&text, ", window ", *c.transformer.window_size);
  }
  if (c.family == ModelFamily::kRetNet) {
    absl::StrAppend(&text, ", heads ", c.retnet.num_heads, ", key dim ",
                    c.retnet.KeyDim(c.hidden_size), ", value dim ",
                    c.retnet.ValueDim(c.hidden_size));
  }
  if (c.family == ModelFamily::kDeltaNet) {
    absl::StrAppend(&text, ", heads ", c.delta_net.num_heads, ", key dim ",
                    c.delta_net.KeyDim(c.hidden_size), ", value dim ",
                    c.delta_net.ValueDim(c.hidden_size));
  }
  if (c.family == ModelFamily::kGatedDeltaNet) {
    absl::StrAppend(&text, ", heads ", c.gated_deltanet.num_heads, " (value heads ",
                    c.gated_deltanet.NumValueHeads(), "), head dim ", c.gated_deltanet.head_dim,
                    ", value dim ", c.gated_deltanet.ValueDim());
  }
  return text;
}

}  // namespace flame::worker
