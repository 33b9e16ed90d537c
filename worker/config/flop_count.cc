#include "worker/config/flop_count.h"

#include <algorithm>

#include "common/status_macros.h"
#include "worker/config/delta_net_config.h"

namespace flame::worker {
namespace {

// fla's chunk size for GLA, simple GLA/RetNet, DeltaNet and Gated DeltaNet.
constexpr int64_t kChunkSize = 64;

// One layer's mixer: its projection weights and its op's forward FLOPs per token.
struct MixerCost {
  int64_t matmul_parameters = 0;
  double forward_flops_per_token = 0;
};

// GatedLinearAttention (fla/layers/gla.py): q, k, v, g (output gate), the low-rank gate
// d -> 16 -> Dk, and o. k and v have Dk/groups and Dv/groups channels (shared by `groups` query
// heads), but the op runs on all H heads with head dims K = Dk/H and V = Dv/H.
//
// chunk_gla, per head and per chunk of C = min(64, T) tokens, counts every product of its dense
// tiles (like the softmax convention, which counts the full T x T score matrix):
//   state update  h += (K ⊙ decay)ᵀ V      2·C·K·V
//   inter output  o  = (Q ⊙ decay) h        2·C·K·V
//   scores        A  = (Q ⊙ γ)(K ⊙ 1/γ)ᵀ    2·C·C·K
//   intra output  o += A V                  2·C·C·V
// so per token and head 4·K·V + 2·C·(K + V): linear in T, with no T² term.
MixerCost GlaCost(const ModelConfig& config, int64_t seq_len) {
  const GlaOptions& g = config.gla;
  const int64_t d = config.hidden_size;
  const int64_t key_dim = g.KeyDim(d), value_dim = g.ValueDim(d);
  const int64_t groups = g.num_heads / g.num_kv_heads;
  MixerCost cost;
  cost.matmul_parameters = d * key_dim                                // q_proj
                           + d * key_dim / groups                     // k_proj
                           + d * value_dim / groups                   // v_proj
                           + (g.use_output_gate ? d * value_dim : 0)  // g_proj
                           + d * g.gate_low_rank_dim                  // gk_proj[0]
                           + g.gate_low_rank_dim * key_dim / groups   // gk_proj[1]
                           + value_dim * d;                           // o_proj
  const double k = static_cast<double>(key_dim / g.num_heads);
  const double v = static_cast<double>(value_dim / g.num_heads);
  const double c = static_cast<double>(std::clamp<int64_t>(seq_len, 1, kChunkSize));
  cost.forward_flops_per_token =
      static_cast<double>(g.num_heads) * (4.0 * k * v + 2.0 * c * (k + v));
  return cost;
}

// Every family's count follows the convention above; GLA's is here, the others beside their
// options (their derivations are written there).
double GlaTrainingFlopsPerToken(const ModelConfig& config, int64_t seq_len) {
  return 6.0 * static_cast<double>(MatmulParameterCount(config)) +
         3.0 * static_cast<double>(config.num_hidden_layers) *
             MixerForwardFlopsPerToken(config, seq_len);
}

}  // namespace

int64_t MatmulParameterCount(const ModelConfig& config) {
  FLAME_CHECK(config.family == ModelFamily::kGla);  // the split below is GLA's
  const int64_t d = config.hidden_size;
  const int64_t mlp = 3 * d * config.MlpIntermediateSize();  // gate, up, down
  const int64_t per_layer = GlaCost(config, kChunkSize).matmul_parameters + mlp;
  return config.num_hidden_layers * per_layer + d * config.vocab_size;  // + lm_head
}

double MixerForwardFlopsPerToken(const ModelConfig& config, int64_t seq_len_or_context_len) {
  FLAME_CHECK(config.family == ModelFamily::kGla);
  return GlaCost(config, seq_len_or_context_len).forward_flops_per_token;
}

double TrainingFlopsPerToken(const ModelConfig& config, int64_t seq_len_or_context_len) {
  switch (config.family) {
    case ModelFamily::kGla:
      return GlaTrainingFlopsPerToken(config, seq_len_or_context_len);
    case ModelFamily::kTransformer:  // the only family whose cost grows with the context
      return config.transformer.TrainingFlopsPerToken(config, seq_len_or_context_len);
    case ModelFamily::kRetNet:
      return config.retnet.TrainingFlopsPerToken(config);
    case ModelFamily::kDeltaNet:
      return DeltaNetTrainingFlopsPerToken(config);
    case ModelFamily::kGatedDeltaNet:
      return GatedDeltaNetTrainingFlopsPerToken(config);
  }
  return 0;  // unreachable: -Wswitch makes a new family without a case fail to compile
}

}  // namespace flame::worker
