// config.json parsing: flame's configs load, fla's defaults apply, bad input names its key.
#include "worker/config/model_config.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

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

TEST(ModelConfig, LoadsTheShippedGlaConfigs) {
  const absl::StatusOr<ModelConfig> tiny =
      LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/gla_tiny.json"));
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->vocab_size, 2048);
  EXPECT_EQ(tiny->gla.KeyDim(tiny->hidden_size) % tiny->gla.num_heads, 0);

  const absl::StatusOr<ModelConfig> big =
      LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/gla_340M.json"));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->family, ModelFamily::kGla);
  EXPECT_EQ(big->hidden_size, 1024);
  EXPECT_EQ(big->num_hidden_layers, 24);
  EXPECT_EQ(big->gla.num_heads, 4);
  EXPECT_EQ(big->gla.KeyDim(1024), 512);
  EXPECT_EQ(big->gla.ValueDim(1024), 1024);
  EXPECT_TRUE(big->tie_word_embeddings);
  EXPECT_EQ(big->MlpIntermediateSize(), 2816);
}

TEST(ModelConfig, AppliesFlaDefaultsForMissingAndNullFields) {
  const absl::StatusOr<ModelConfig> config =
      Parse(R"({"model_type": "gla", "num_kv_heads": null, "clamp_min": null})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 2048);
  EXPECT_EQ(config->num_hidden_layers, 24);
  EXPECT_EQ(config->vocab_size, 32000);
  EXPECT_EQ(config->gla.num_heads, 4);
  EXPECT_EQ(config->gla.num_kv_heads, 4);
  EXPECT_DOUBLE_EQ(config->gla.expand_k, 0.5);
  EXPECT_TRUE(config->gla.use_output_gate);
  EXPECT_FALSE(config->gla.clamp_min.has_value());
  EXPECT_EQ(config->gla.gate_logit_normalizer, 16);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->MlpIntermediateSize(), 5632);  // fla's GatedMLP for hidden 2048
}

TEST(ModelConfig, SizesTheMlpLikeFlaOrTakesTheGivenSize) {
  ModelConfig config;
  config.hidden_size = 128;
  config.hidden_ratio = 4;
  EXPECT_EQ(config.MlpIntermediateSize(), 512);  // int(341.33) = 341 -> 512
  config.hidden_size = 100;
  EXPECT_EQ(config.MlpIntermediateSize(), 512);  // int(266.67) = 266 -> 512
  config.hidden_ratio = 3;
  EXPECT_EQ(config.MlpIntermediateSize(), 256);  // 200 -> 256
  config.intermediate_size = 300;
  EXPECT_EQ(config.MlpIntermediateSize(), 300);
}

TEST(ModelConfig, AcceptsHfBookkeepingKeys) {
  EXPECT_TRUE(Parse(R"({"model_type": "gla", "architectures": ["GLAForCausalLM"],
                        "transformers_version": "4.45.0", "torch_dtype": "bfloat16",
                        "use_cache": true, "fuse_swiglu": false})")
                  .ok());
}

TEST(ModelConfig, RejectsBadInputByKey) {
  ExpectError("not json", "not valid JSON");
  ExpectError("[1, 2]", "must be a JSON object");
  ExpectError("{}", "model_type is required");
  ExpectError(R"({"model_type": "mamba9"})", "\"mamba9\" is unknown");
  ExpectError(R"({"model_type": "gla", "hidden_size": "big"})", "hidden_size must be an integer");
  ExpectError(R"({"model_type": "gla", "hidden_size": 0})", "hidden_size must be positive");
  ExpectError(R"({"model_type": "gla", "norm_eps": -1})", "norm_eps must be positive");
  ExpectError(R"({"model_type": "gla", "hidden_size": 96, "num_heads": 5})",
              "expand_k gives a key dim of 48");
  ExpectError(R"({"model_type": "gla", "num_heads": 4, "num_kv_heads": 3})",
              "num_kv_heads must divide num_heads");
  ExpectError(R"({"model_type": "gla", "tie_word_embeddings": "yes"})",
              "tie_word_embeddings must be true or false");
  ExpectError(R"({"model_type": "gla", "hidden_act": "gelu"})", "hidden_act");
  ExpectError(R"({"model_type": "gla", "attn": {"layers": [1]}})", "attn");
  ExpectError(R"({"model_type": "gla", "feature_map": "elu"})", "feature_map");
  ExpectError(R"({"model_type": "gla", "fuse_linear_cross_entropy": true})", "cannot both be true");
  ExpectError(R"({"model_type": "gla", "pad_token_id": 99999})", "pad_token_id");
}

TEST(ModelConfig, NamesAMissingFile) {
  const absl::StatusOr<ModelConfig> config = LoadModelConfig("/nonexistent/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("/nonexistent/config.json"), std::string::npos);
}

}  // namespace
}  // namespace flame::worker
