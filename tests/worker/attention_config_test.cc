// config.json for the transformer and RetNet families: flame's shipped configs and ours load,
// fla's defaults apply, bad or unimplemented settings are refused by key, and the training FLOP
// counts match hand arithmetic.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/config/model_config.h"

namespace flame::worker {
namespace {

absl::StatusOr<ModelConfig> Load(const std::string& name) {
  return LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/", name));
}

void ExpectError(const std::string& json, const std::string& fragment) {
  const absl::StatusOr<ModelConfig> config = ParseModelConfig(json, "c.json");
  ASSERT_FALSE(config.ok()) << json;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find(absl::StrCat("c.json: ", fragment)), std::string::npos)
      << config.status().message();
}

TEST(AttentionModelConfig, LoadsFlamesShippedTransformerConfigs) {
  const absl::StatusOr<ModelConfig> small = Load("transformer_340M.json");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->family, ModelFamily::kTransformer);
  EXPECT_EQ(small->hidden_size, 1024);
  EXPECT_EQ(small->num_hidden_layers, 24);
  EXPECT_EQ(small->transformer.num_heads, 16);
  EXPECT_EQ(small->transformer.num_kv_heads, 16);
  EXPECT_EQ(small->transformer.max_position_embeddings, 8192);
  EXPECT_EQ(small->transformer.HeadDim(1024), 64);
  EXPECT_DOUBLE_EQ(small->transformer.rope_theta, 10000);
  EXPECT_FALSE(small->transformer.window_size.has_value());
  EXPECT_EQ(small->MlpIntermediateSize(), 2816);
  EXPECT_TRUE(small->fuse_norm);

  const absl::StatusOr<ModelConfig> one = Load("transformer_1B.json");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->hidden_size, 2048);
  EXPECT_EQ(one->transformer.num_heads, 32);
  EXPECT_EQ(one->transformer.num_kv_heads, 32);  // null -> num_heads
  EXPECT_EQ(one->vocab_size, 32000);             // absent -> fla's default
  EXPECT_EQ(one->pad_token_id, 2);
  EXPECT_EQ(one->MlpIntermediateSize(), 5632);

  const absl::StatusOr<ModelConfig> big = Load("transformer_7B.json");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->transformer.num_heads, 32);
  EXPECT_EQ(big->transformer.num_kv_heads, 8);
  EXPECT_EQ(big->transformer.KvDim(4096), 1024);
  EXPECT_EQ(big->MlpIntermediateSize(), 14336);

  for (const char* name : {"transformer_1.3B.json", "transformer_tiny.json"}) {
    const absl::StatusOr<ModelConfig> config = Load(name);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->family, ModelFamily::kTransformer) << name;
  }
  EXPECT_EQ(Load("transformer_tiny.json")->vocab_size, 2048);
}

TEST(AttentionModelConfig, LoadsTheRetNetConfigs) {
  const absl::StatusOr<ModelConfig> small = Load("retnet_340M.json");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->family, ModelFamily::kRetNet);
  EXPECT_EQ(small->retnet.num_heads, 4);
  EXPECT_EQ(small->retnet.KeyDim(1024), 1024);
  EXPECT_EQ(small->retnet.ValueDim(1024), 2048);
  EXPECT_EQ(small->MlpIntermediateSize(), 1536);
  EXPECT_TRUE(small->tie_word_embeddings);

  const absl::StatusOr<ModelConfig> big = Load("retnet_1.3B.json");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->retnet.num_heads, 8);
  EXPECT_EQ(big->retnet.HeadKeyDim(2048), 256);
  EXPECT_EQ(big->retnet.HeadValueDim(2048), 512);
  EXPECT_EQ(big->MlpIntermediateSize(), 2816);
  EXPECT_FALSE(big->tie_word_embeddings);

  const absl::StatusOr<ModelConfig> tiny = Load("retnet_tiny.json");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->vocab_size, 2048);
}

TEST(AttentionModelConfig, AppliesFlaDefaults) {
  const absl::StatusOr<ModelConfig> t = ParseModelConfig(R"({"model_type": "transformer"})", "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->transformer.num_heads, 32);
  EXPECT_EQ(t->transformer.num_kv_heads, 32);
  EXPECT_FALSE(t->transformer.qkv_bias);
  EXPECT_FALSE(t->transformer.qk_norm);
  EXPECT_EQ(t->transformer.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(t->hidden_ratio, 4);

  const absl::StatusOr<ModelConfig> r = ParseModelConfig(R"({"model_type": "retnet"})", "r");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->retnet.num_heads, 8);
  EXPECT_DOUBLE_EQ(r->retnet.expand_k, 1);
  EXPECT_DOUBLE_EQ(r->retnet.expand_v, 2);
  EXPECT_TRUE(r->retnet.use_output_gate);
  EXPECT_DOUBLE_EQ(r->hidden_ratio, 2);  // RetNetConfig's own default
  EXPECT_EQ(r->MlpIntermediateSize(), 2816);
  // An explicit null reaches fla's GatedMLP, whose default is 4.
  const absl::StatusOr<ModelConfig> null_ratio =
      ParseModelConfig(R"({"model_type": "retnet", "hidden_ratio": null})", "r");
  ASSERT_TRUE(null_ratio.ok()) << null_ratio.status();
  EXPECT_DOUBLE_EQ(null_ratio->hidden_ratio, 4);
}

TEST(AttentionModelConfig, RefusesBadTransformerSettingsByKey) {
  ExpectError(R"({"model_type": "transformer", "num_heads": 0})", "num_heads must be positive");
  ExpectError(R"({"model_type": "transformer", "num_heads": 32, "num_kv_heads": 5})",
              "num_kv_heads must divide num_heads");
  ExpectError(R"({"model_type": "transformer", "hidden_size": 100, "num_heads": 8})",
              "num_heads must divide hidden_size");
  ExpectError(R"({"model_type": "transformer", "hidden_size": 96, "num_heads": 32})",
              "num_heads gives a head dim of 3");
  ExpectError(R"({"model_type": "transformer", "window_size": 0})", "window_size must be positive");
  ExpectError(R"({"model_type": "transformer", "rope_theta": null})",
              "rope_theta must be a number");
  ExpectError(R"({"model_type": "transformer", "rope_theta": "big"})",
              "rope_theta must be a number");
  ExpectError(R"({"model_type": "transformer", "qk_norm": 1})", "qk_norm must be true or false");
  ExpectError(R"({"model_type": "transformer", "attention_bias": true})", "attention_bias");
  ExpectError(R"({"model_type": "transformer", "attn": {"layers": [1]}})", "attn ");
  ExpectError(R"({"model_type": "transformer", "hidden_act": "gelu"})", "hidden_act");
}

TEST(AttentionModelConfig, RefusesBadRetNetSettingsByKey) {
  ExpectError(R"({"model_type": "retnet", "num_heads": 3})", "expand_k gives a key dim of 2048");
  ExpectError(R"({"model_type": "retnet", "expand_v": 0})", "expand_v must be positive");
  ExpectError(R"({"model_type": "retnet", "num_heads": 8, "num_kv_heads": 3})",
              "num_kv_heads must divide num_heads");
  ExpectError(R"({"model_type": "retnet", "num_heads": 4})",
              "expand_k gives a head key dim of 512");
  ExpectError(R"({"model_type": "retnet", "feature_map": "elu"})", "feature_map \"elu\"");
  ExpectError(R"({"model_type": "retnet", "use_short_conv": true})", "use_short_conv");
  ExpectError(R"({"model_type": "retnet", "attn_mode": "fast"})", "attn_mode must be");
  // Kernel choices and fields that no RetNet layer reads are accepted.
  EXPECT_TRUE(ParseModelConfig(R"({"model_type": "retnet", "attn_mode": "fused_recurrent",
      "use_short_conv": false, "conv_size": 4, "fuse_swiglu": false, "feature_map": "relu"})",
                               "r")
                  .ok());
}

// Hand arithmetic for hidden 64, 2 layers, 4 heads of 16 with 2 key/value heads (kv dim 32),
// MLP 128, vocab 100, context 8:
//   weights per layer  q, o 2·64·64 + k, v 2·64·32 + MLP 3·64·128 = 8192 + 4096 + 24576 = 36864
//   weights            2·36864 + lm_head 64·100                  = 80128
//   keys per query     (8 + 1) / 2 = 4.5;  attention 2 layers · 4·64·4.5 = 2304
//   forward            2·80128 + 2304 = 162560;  training 3x = 487680
// With window 3: keys (1+2+3·6) / 8 = 2.625, attention 1344, training 3·(160256 + 1344) = 484800.
TEST(AttentionModelConfig, CountsTransformerTrainingFlopsPerToken) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(
      R"({"model_type": "transformer", "hidden_size": 64, "num_hidden_layers": 2,
          "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128, "vocab_size": 100})",
      "t");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->transformer.TrainingFlopsPerToken(*config, 8), 487680);
  config->transformer.window_size = 3;
  EXPECT_DOUBLE_EQ(config->transformer.TrainingFlopsPerToken(*config, 8), 484800);
  // The attention term grows with the context; a window caps it.
  config->transformer.window_size.reset();
  EXPECT_GT(config->transformer.TrainingFlopsPerToken(*config, 4096),
            config->transformer.TrainingFlopsPerToken(*config, 8));
}

// Hand arithmetic for hidden 64, 2 layers, 2 heads, expand_k 1 (dk 32), expand_v 2 (dv 64),
// MLP 128, vocab 100, output gate on:
//   weights per layer  q 4096 + k 4096 + v 8192 + g 8192 + o 8192 + MLP 24576 = 57344
//   weights            2·57344 + lm_head 6400                                = 121088
//   retention / head   2·64·32 + 2·64·64 + 4·32·64 = 4096 + 8192 + 8192     = 20480
//   retention          2 layers · 2 heads · 20480                            = 81920
//   forward            2·121088 + 81920 = 324096;  training 3x = 972288
TEST(AttentionModelConfig, CountsRetNetTrainingFlopsPerToken) {
  const absl::StatusOr<ModelConfig> config = ParseModelConfig(
      R"({"model_type": "retnet", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2,
          "intermediate_size": 128, "vocab_size": 100})",
      "r");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->retnet.TrainingFlopsPerToken(*config), 972288);
}

}  // namespace
}  // namespace flame::worker
