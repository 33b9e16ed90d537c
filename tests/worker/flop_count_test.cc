// The FLOP count behind MFU, against arithmetic done by hand for configs/models/gla_tiny.json.
#include "worker/config/flop_count.h"

#include <gtest/gtest.h>

#include "tests/worker/test_util.h"
#include "worker/config/delta_net_config.h"

namespace flame::worker {
namespace {

ModelConfig TinyGla() {
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig(testing::SourcePath("configs/models/gla_tiny.json"));
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// gla_tiny: hidden d = 128, 2 layers, 2 heads, expand_k 0.5 (Dk = 64, K = 32 per head),
// expand_v 1 (Dv = 128, V = 64 per head), MLP 256·ceil(int(128·4·2/3)/256) = 512, vocab 2048.
TEST(FlopCount, CountsTheMatmulWeightsOfATinyGlaByHand) {
  const int64_t mixer = 128 * 64      // q_proj
                        + 128 * 64    // k_proj
                        + 128 * 128   // v_proj
                        + 128 * 128   // g_proj
                        + 128 * 16    // gk_proj: d -> 16
                        + 16 * 64     // gk_proj: 16 -> Dk
                        + 128 * 128;  // o_proj
  EXPECT_EQ(mixer, 68608);
  const int64_t mlp = 3 * 128 * 512;
  const int64_t lm_head = 128 * 2048;  // the input embedding (also 128 x 2048) is not counted
  EXPECT_EQ(MatmulParameterCount(TinyGla()), 2 * (mixer + mlp) + lm_head);
  EXPECT_EQ(MatmulParameterCount(TinyGla()), 792576);
}

TEST(FlopCount, GlaMixerIsLinearInTheChunkNotQuadraticInTheSequence) {
  // Per head and token: 4·K·V + 2·C·(K + V) with C = min(64, T); 2 heads.
  const double chunk64 = 2 * (4.0 * 32 * 64 + 2.0 * 64 * (32 + 64));
  EXPECT_DOUBLE_EQ(chunk64, 40960);
  EXPECT_DOUBLE_EQ(MixerForwardFlopsPerToken(TinyGla(), 64), chunk64);
  EXPECT_DOUBLE_EQ(MixerForwardFlopsPerToken(TinyGla(), 2048), chunk64);  // no T² term
  EXPECT_DOUBLE_EQ(MixerForwardFlopsPerToken(TinyGla(), 16),
                   2 * (4.0 * 32 * 64 + 2.0 * 16 * (32 + 64)));
}

TEST(FlopCount, TrainingFlopsAreSixNPlusThreeTimesTheForwardMixer) {
  // 6 · 792576 + 3 · 2 layers · 40960.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(TinyGla(), 2048), 4755456.0 + 245760.0);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(TinyGla(), 2048), 5001216.0);
}

TEST(FlopCount, LmHeadCountsEvenWhenTiedAndKeyValueGroupsShrinkKAndV) {
  ModelConfig config = TinyGla();
  const int64_t untied = MatmulParameterCount(config);
  config.tie_word_embeddings = true;
  EXPECT_EQ(MatmulParameterCount(config), untied);  // the product with lm_head still happens
  // One key/value head for two query heads: k_proj, v_proj and gk_proj[1] halve.
  config.gla.num_kv_heads = 1;
  EXPECT_EQ(MatmulParameterCount(config), untied - 2 * (128 * 32 + 128 * 64 + 16 * 32));
  // The op still runs on both query heads with the same head dims.
  EXPECT_DOUBLE_EQ(MixerForwardFlopsPerToken(config, 64), 40960);
}

// Every family goes through the one entry point; only softmax attention grows with the context.
TEST(FlopCount, DispatchesEveryFamilyToItsOwnCount) {
  for (const char* name : {"gla", "transformer", "retnet", "delta_net", "gated_deltanet"}) {
    absl::StatusOr<ModelConfig> config = LoadModelConfig(
        testing::SourcePath(std::string("configs/models/") + name + "_tiny.json"));
    ASSERT_TRUE(config.ok()) << config.status();
    const double short_context = TrainingFlopsPerToken(*config, 64);
    const double long_context = TrainingFlopsPerToken(*config, 4096);
    EXPECT_GT(short_context, 0) << name;
    if (config->family == ModelFamily::kTransformer) {
      EXPECT_GT(long_context, short_context) << name;
      EXPECT_DOUBLE_EQ(long_context, config->transformer.TrainingFlopsPerToken(*config, 4096));
    } else {
      EXPECT_DOUBLE_EQ(long_context, short_context) << name << ": linear attention has no T term";
    }
  }
  absl::StatusOr<ModelConfig> delta =
      LoadModelConfig(testing::SourcePath("configs/models/delta_net_tiny.json"));
  ASSERT_TRUE(delta.ok());
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(*delta, 64), DeltaNetTrainingFlopsPerToken(*delta));
}

}  // namespace
}  // namespace flame::worker
