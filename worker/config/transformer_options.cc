#include "worker/config/transformer_options.h"

#include <algorithm>

#include "worker/config/model_config.h"

namespace flame::worker {

double TransformerOptions::TrainingFlopsPerToken(const ModelConfig& config,
                                                 int64_t context_len) const {
  const auto d = static_cast<double>(config.hidden_size);
  const auto kv = static_cast<double>(KvDim(config.hidden_size));
  const auto mlp = static_cast<double>(config.MlpIntermediateSize());
  // Weights each token multiplies through: q, o (d x d), k, v (d x kv), gate, up, down.
  const double layer_weights = 2 * d * d + 2 * d * kv + 3 * d * mlp;
  const double weights = static_cast<double>(config.num_hidden_layers) * layer_weights +
                         d * static_cast<double>(config.vocab_size);  // + lm_head

  // Keys per query, averaged over positions 1..T: Σ min(t, W) / T.
  const auto T = static_cast<double>(std::max<int64_t>(context_len, 1));
  double keys = (T + 1) / 2;
  if (window_size && static_cast<double>(*window_size) < T) {
    const auto W = static_cast<double>(*window_size);
    keys = (W * (W + 1) / 2 + (T - W) * W) / T;  // rising to W, then flat at W
  }
  const double attention = static_cast<double>(config.num_hidden_layers) * 4 * d * keys;
  return 3 * (2 * weights + attention);
}

}  // namespace flame::worker
