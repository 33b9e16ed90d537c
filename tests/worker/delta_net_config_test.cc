// config.json for delta_net and gated_deltanet: flame's shipped configs load unchanged, fla's
// defaults apply, bad values name their key, and the training FLOP count by hand arithmetic.
#include "worker/config/delta_net_config.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/config/model_config.h"

namespace flame::worker {
namespace {

absl::StatusOr<ModelConfig> Parse(const std::string& json) {
  return ParseModelConfig(json, "c.json");
}

void ExpectError(const std::string& json, const std::string& fragment) {
  const absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_FALSE(config.ok()) << json;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find(fragment), std::string::npos)
      << config.status().message();
}

// flame's configs/delta_net_1B.json, verbatim.
constexpr char kFlameDeltaNet1B[] = R"({
    "attn": null,
    "attn_mode": "chunk",
    "bos_token_id": 1,
    "conv_size": 4,
    "eos_token_id": 2,
    "expand_k": 1,
    "expand_v": 1,
    "fuse_cross_entropy": true,
    "fuse_norm": true,
    "hidden_act": "swish",
    "hidden_ratio": 4,
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": null,
    "model_type": "delta_net",
    "norm_eps": 1e-06,
    "num_heads": 16,
    "num_hidden_layers": 24,
    "pad_token_id": 2,
    "qk_activation": "silu",
    "qk_norm": "l2",
    "tie_word_embeddings": false,
    "use_beta": true,
    "use_cache": true,
    "use_gate": false,
    "use_output_norm": true,
    "use_short_conv": true
})";

// flame's configs/gated_deltanet_340M.json, verbatim.
constexpr char kFlameGatedDeltaNet340M[] = R"({
    "attn_mode": "chunk",
    "bos_token_id": 1,
    "conv_size": 4,
    "eos_token_id": 2,
    "expand_v": 2,
    "fuse_cross_entropy": true,
    "head_dim": 256,
    "hidden_act": "swish",
    "hidden_ratio": 4,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": null,
    "model_type": "gated_deltanet",
    "norm_eps": 1e-06,
    "num_heads": 6,
    "num_hidden_layers": 21,
    "tie_word_embeddings": false,
    "use_cache": true,
    "use_gate": true,
    "use_short_conv": true
})";

TEST(DeltaNetConfig, LoadsFlamesConfigsUnchanged) {
  const absl::StatusOr<ModelConfig> delta = Parse(kFlameDeltaNet1B);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(delta->family, ModelFamily::kDeltaNet);
  EXPECT_EQ(delta->hidden_size, 2048);
  EXPECT_EQ(delta->delta_net.num_heads, 16);
  EXPECT_EQ(delta->delta_net.KeyDim(2048), 2048);
  EXPECT_EQ(delta->pad_token_id, 2);
  EXPECT_EQ(delta->delta_net.qk_activation, "silu");

  const absl::StatusOr<ModelConfig> gated = Parse(kFlameGatedDeltaNet340M);
  ASSERT_TRUE(gated.ok()) << gated.status();
  EXPECT_EQ(gated->family, ModelFamily::kGatedDeltaNet);
  EXPECT_EQ(gated->num_hidden_layers, 21);
  EXPECT_EQ(gated->gated_deltanet.KeyDim(), 1536);
  EXPECT_EQ(gated->gated_deltanet.HeadVDim(), 512);
  EXPECT_EQ(gated->gated_deltanet.ValueDim(), 3072);
  EXPECT_EQ(gated->gated_deltanet.NumValueHeads(), 6);
}

TEST(DeltaNetConfig, LoadsOurShippedConfigs) {
  struct Expected {
    const char* file;
    ModelFamily family;
    int64_t hidden, layers, vocab;
  };
  const Expected all[] = {
      {"delta_net_340M.json", ModelFamily::kDeltaNet, 1024, 24, 32000},
      {"delta_net_1.3B.json", ModelFamily::kDeltaNet, 2048, 24, 32000},
      {"delta_net_tiny.json", ModelFamily::kDeltaNet, 128, 2, 2048},
      {"gated_deltanet_340M.json", ModelFamily::kGatedDeltaNet, 1024, 21, 32000},
      {"gated_deltanet_1.3B.json", ModelFamily::kGatedDeltaNet, 2048, 21, 32000},
      {"gated_deltanet_tiny.json", ModelFamily::kGatedDeltaNet, 128, 2, 2048},
  };
  for (const Expected& e : all) {
    const absl::StatusOr<ModelConfig> c =
        LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/", e.file));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->family, e.family) << e.file;
    EXPECT_EQ(c->hidden_size, e.hidden) << e.file;
    EXPECT_EQ(c->num_hidden_layers, e.layers) << e.file;
    EXPECT_EQ(c->vocab_size, e.vocab) << e.file;
    EXPECT_EQ(c->bos_token_id, 1) << e.file;
    EXPECT_EQ(c->eos_token_id, 2) << e.file;
  }
}

TEST(DeltaNetConfig, AppliesFlaDefaults) {
  const absl::StatusOr<ModelConfig> delta = Parse(R"({"model_type": "delta_net"})");
  ASSERT_TRUE(delta.ok()) << delta.status();
  const DeltaNetOptions& d = delta->delta_net;
  EXPECT_EQ(delta->num_hidden_layers, 24);
  EXPECT_EQ(d.num_heads, 16);
  EXPECT_DOUBLE_EQ(d.expand_k, 1.0);
  EXPECT_DOUBLE_EQ(d.expand_v, 1.0);
  EXPECT_TRUE(d.use_beta);
  EXPECT_FALSE(d.use_gate);
  EXPECT_TRUE(d.use_short_conv);
  EXPECT_EQ(d.conv_size, 4);
  EXPECT_FALSE(d.allow_neg_eigval);
  EXPECT_EQ(d.qk_activation, "silu");
  EXPECT_EQ(d.qk_norm, "l2");

  const absl::StatusOr<ModelConfig> gated = Parse(R"({"model_type": "gated_deltanet"})");
  ASSERT_TRUE(gated.ok()) << gated.status();
  const GatedDeltaNetOptions& g = gated->gated_deltanet;
  EXPECT_EQ(gated->num_hidden_layers, 21);  // GatedDeltaNetConfig's own default
  EXPECT_EQ(gated->hidden_size, 2048);
  EXPECT_EQ(g.head_dim, 256);
  EXPECT_EQ(g.num_heads, 6);
  EXPECT_FALSE(g.num_v_heads.has_value());
  EXPECT_DOUBLE_EQ(g.expand_v, 2.0);
  EXPECT_TRUE(g.use_gate);
  EXPECT_TRUE(g.use_short_conv);
  EXPECT_EQ(g.output_gate_activation, "swish");
  // fla's key dim 1536 = 0.75 · 2048 for the defaults.
  EXPECT_EQ(g.KeyDim(), 1536);
}

TEST(DeltaNetConfig, RefusesBadValuesNamingTheKey) {
  ExpectError(R"({"model_type": "delta_net", "qk_activation": "tanh"})", "qk_activation");
  ExpectError(R"({"model_type": "delta_net", "qk_norm": "max"})", "qk_norm");
  ExpectError(R"({"model_type": "delta_net", "attn_mode": "fused_chunk"})", "deprecated");
  ExpectError(R"({"model_type": "delta_net", "attn_mode": "parallel"})", "attn_mode");
  ExpectError(R"({"model_type": "delta_net", "num_heads": 0})", "num_heads must be positive");
  ExpectError(R"({"model_type": "delta_net", "num_heads": 3})", "expand_k gives a dim of 2048");
  ExpectError(R"({"model_type": "delta_net", "expand_v": 0.3333})", "expand_v");
  ExpectError(R"({"model_type": "delta_net", "use_beta": "yes"})", "use_beta must be true");
  ExpectError(R"({"model_type": "delta_net", "conv_size": -1})", "conv_size");
  ExpectError(R"({"model_type": "gated_deltanet", "num_v_heads": 9})",
              "num_v_heads must be a multiple of num_heads (6)");
  ExpectError(R"({"model_type": "gated_deltanet", "head_dim": 0})", "head_dim");
  ExpectError(R"({"model_type": "gated_deltanet", "expand_v": 1.3})", "expand_v");
  ExpectError(R"({"model_type": "gated_deltanet", "output_gate_activation": "relu"})",
              "output_gate_activation");
  ExpectError(R"({"model_type": "gated_deltanet", "allow_neg_eigval": 1})", "allow_neg_eigval");
  ExpectError(R"({"model_type": "gated_deltanet", "attn": {"layers": [1]}})", "attn");
}

TEST(DeltaNetFlops, DeltaRulePerTokenCostIsTheChunkFormulaByHand) {
  // K = V = 128, C = 64: 6·128·128 = 98304; 64·(6·128 + 4·128) = 81920; 64²/3 = 1365.33.
  EXPECT_NEAR(DeltaRuleForwardFlopsPerToken(128, 128), 98304 + 81920 + 4096.0 / 3, 1e-6);
  // K = 256, V = 512: 6·256·512 = 786432; 64·(1536 + 2048) = 229376.
  EXPECT_NEAR(DeltaRuleForwardFlopsPerToken(256, 512), 786432 + 229376 + 4096.0 / 3, 1e-6);
}

TEST(DeltaNetFlops, CountsProjectionsConvRuleMlpAndHeadThreeTimes) {
  // delta_net, hidden 128, 2 layers, 2 heads (dk = dv = 64), vocab 2048, MLP 512:
  //   q, k, v, o projections   2·128·(128 + 128 + 128) + 2·128·128 = 131072
  //   b_proj                   2·128·2                               = 512
  //   convolutions             2·4·384                               = 3072
  //   delta rule               2 · (6·64·64 + 64·(6·64 + 4·64) + 64²/3) = 2·(24576 + 40960 +
  //   1365.33) MLP                      6·128·512                             = 393216 lm_head
  //   2·128·2048                            = 524288
  const absl::StatusOr<ModelConfig> delta = Parse(
      R"({"model_type": "delta_net", "hidden_size": 128, "num_hidden_layers": 2,
          "num_heads": 2, "vocab_size": 2048})");
  ASSERT_TRUE(delta.ok()) << delta.status();
  ASSERT_EQ(delta->MlpIntermediateSize(), 512);
  const double rule = 2 * (24576 + 40960 + 4096.0 / 3);
  const double layer = 131072 + 512 + 3072 + rule + 393216;
  EXPECT_NEAR(DeltaNetTrainingFlopsPerToken(*delta), 3 * (2 * layer + 524288), 1e-3);

  // gated_deltanet, hidden 128, 2 layers, 2 heads of 32 (key dim 64), expand_v 2 (value dim 128),
  // vocab 2048, MLP 512:
  //   q, k, v, o projections   2·128·(64 + 64 + 128) + 2·128·128 = 98304
  //   a_proj, b_proj           2·2·128·2                         = 1024
  //   g_proj                   2·128·128                         = 32768
  //   convolutions             2·4·256                           = 2048
  //   gated delta rule         2 · (6·32·64 + 64·(6·32 + 4·64) + 64²/3) = 2·(12288 + 28672 +
  //   1365.33)
  const absl::StatusOr<ModelConfig> gated = Parse(
      R"({"model_type": "gated_deltanet", "hidden_size": 128, "num_hidden_layers": 2,
          "num_heads": 2, "head_dim": 32, "vocab_size": 2048})");
  ASSERT_TRUE(gated.ok()) << gated.status();
  const double gated_rule = 2 * (12288 + 28672 + 4096.0 / 3);
  const double gated_layer = 98304 + 1024 + 32768 + 2048 + gated_rule + 393216;
  EXPECT_NEAR(GatedDeltaNetTrainingFlopsPerToken(*gated), 3 * (2 * gated_layer + 524288), 1e-3);
}

}  // namespace
}  // namespace flame::worker
