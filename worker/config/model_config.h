// ModelConfig: an HF-style config.json (fla's field names, so flame's configs/*.json load
// unchanged) parsed into plain C++.
//
// Fields every fla family shares live in ModelConfig itself; each family has its own options
// struct (GlaOptions, TransformerOptions, RetNetOptions, DeltaNetOptions, GatedDeltaNetOptions).
// A family plugs in with its options, a parser in model_config.cc's family table, a mixer and a
// case in BuildCausalLm (worker/model/causal_lm.cc), and a case in TrainingFlopsPerToken
// (worker/config/flop_count.cc; the compiler flags a missing one).
// Keys that HF configs carry but that do not change the computation (architectures,
// transformers_version, use_cache, the fuse_* kernel choices, ...) are accepted and ignored;
// settings that would change the model and that we do not implement are refused by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/config/delta_net_options.h"
#include "worker/config/retnet_options.h"
#include "worker/config/transformer_options.h"

namespace flame::worker {

enum class ModelFamily { kGla, kTransformer, kRetNet, kDeltaNet, kGatedDeltaNet };

// GatedLinearAttention (fla/layers/gla.py) options.
struct GlaOptions {
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;  // config null -> num_heads
  double expand_k = 0.5;
  double expand_v = 1.0;
  std::string feature_map;  // "" (none) | relu | swish | sigmoid
  bool use_short_conv = false;
  int64_t conv_size = 4;
  bool use_output_gate = true;
  bool elementwise_affine = true;
  std::optional<double> clamp_min;
  // Not in GLAConfig: fla's layer always uses its defaults.
  int64_t gate_logit_normalizer = 16;
  int64_t gate_low_rank_dim = 16;

  int64_t KeyDim(int64_t hidden_size) const;    // int(hidden * expand_k)
  int64_t ValueDim(int64_t hidden_size) const;  // int(hidden * expand_v)
};

struct ModelConfig {
  std::string model_type;  // as written in config.json ("gla")
  ModelFamily family = ModelFamily::kGla;
  int64_t hidden_size = 2048;
  int64_t num_hidden_layers = 24;
  int64_t vocab_size = 32000;
  double hidden_ratio = 4;
  std::optional<int64_t> intermediate_size;  // null -> derived from hidden_ratio
  double norm_eps = 1e-6;
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;
  std::optional<int64_t> pad_token_id;
  // fuse_norm decides only a parameter name (fla's g_norm_swish_gate vs g_norm), which a
  // safetensors export must reproduce.
  bool fuse_norm = true;
  GlaOptions gla;
  TransformerOptions transformer;
  RetNetOptions retnet;
  DeltaNetOptions delta_net;            // model_type delta_net
  GatedDeltaNetOptions gated_deltanet;  // model_type gated_deltanet

  // SwiGLU width: intermediate_size, else 256 * ceil(int(hidden * ratio * 2/3) / 256) (fla's
  // GatedMLP).
  int64_t MlpIntermediateSize() const;
};

// Parses and validates config.json text; `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source);

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// One line for logs: "gla: hidden 128, 2 layers, 2 heads, vocab 2048, ...".
std::string DescribeModelConfig(const ModelConfig& config);

}  // namespace flame::worker
