#include "worker/config/retnet_options.h"

#include "worker/config/model_config.h"

namespace flame::worker {

int64_t RetNetOptions::KeyDim(int64_t hidden_size) const {
  return static_cast<int64_t>(static_cast<double>(hidden_size) * expand_k);
}

int64_t RetNetOptions::ValueDim(int64_t hidden_size) const {
  return static_cast<int64_t>(static_cast<double>(hidden_size) * expand_v);
}

double RetNetOptions::TrainingFlopsPerToken(const ModelConfig& config) const {
  const int64_t hidden = config.hidden_size;
  const auto d = static_cast<double>(hidden);
  const auto groups = static_cast<double>(num_heads / num_kv_heads);
  const auto key_dim = static_cast<double>(KeyDim(hidden));
  const auto value_dim = static_cast<double>(ValueDim(hidden));
  const auto mlp = static_cast<double>(config.MlpIntermediateSize());
  // q (d x Dk), k (d x Dk/g), v (d x Dv/g), g (d x Dv), o (Dv x d), gate, up, down.
  double layer_weights =
      d * key_dim + d * key_dim / groups + d * value_dim / groups + value_dim * d + 3 * d * mlp;
  if (use_output_gate) layer_weights += d * value_dim;
  const double weights = static_cast<double>(config.num_hidden_layers) * layer_weights +
                         d * static_cast<double>(config.vocab_size);  // + lm_head

  const auto C = static_cast<double>(kChunkSize);
  const auto dk = static_cast<double>(HeadKeyDim(hidden));
  const auto dv = static_cast<double>(HeadValueDim(hidden));
  const double retention_per_head = 2 * C * dk + 2 * C * dv + 4 * dk * dv;
  const double retention = static_cast<double>(config.num_hidden_layers) *
                           static_cast<double>(num_heads) * retention_per_head;
  return 3 * (2 * weights + retention);
}

}  // namespace flame::worker
