// The transformer family: fla's parameter names, shapes and counts (the 340M config included),
// packed rows, causality, sliding windows, the label shift and initialisation.
#include "worker/model/transformer_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/causal_lm_checks.h"
#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"

namespace flame::worker::model {
namespace {

using testing::ExpectCausal;
using testing::ExpectPackedRowMatchesSeparateSequences;
using testing::MaxDifference;
using testing::ParameterShapes;

// hidden 32, 4 query heads of 8, 2 key/value heads, MLP 256 (256·ceil(int(32·4·2/3) / 256)).
ModelConfig TinyConfig() {
  ModelConfig config;
  config.model_type = "transformer";
  config.family = ModelFamily::kTransformer;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.vocab_size = 50;
  config.transformer.num_heads = 4;
  config.transformer.num_kv_heads = 2;
  return config;
}

TEST(TransformerModel, UsesFlaParameterNamesAndShapes) {
  ModelConfig config = TinyConfig();
  config.num_hidden_layers = 1;
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {50, 32}},
      {"model.layers.0.attn_norm.weight", {32}},
      {"model.layers.0.attn.q_proj.weight", {32, 32}},
      {"model.layers.0.attn.k_proj.weight", {16, 32}},  // 2 kv heads x head dim 8
      {"model.layers.0.attn.v_proj.weight", {16, 32}},
      {"model.layers.0.attn.o_proj.weight", {32, 32}},
      {"model.layers.0.mlp_norm.weight", {32}},
      {"model.layers.0.mlp.gate_proj.weight", {256, 32}},
      {"model.layers.0.mlp.up_proj.weight", {256, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 256}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {50, 32}},
  };
  EXPECT_EQ(ParameterShapes(*BuildCausalLm(config, 0)), expected);
}

TEST(TransformerModel, AddsQkvBiasesAndPerHeadQkNormsAndDropsLmHeadWhenTied) {
  ModelConfig config = TinyConfig();
  config.transformer.qkv_bias = true;
  config.transformer.qk_norm = true;
  config.tie_word_embeddings = true;
  const auto shapes = ParameterShapes(*BuildCausalLm(config, 0));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(shapes.at("model.layers.1.attn.q_proj.bias"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("model.layers.1.attn.k_proj.bias"), (std::vector<int64_t>{16}));
  EXPECT_EQ(shapes.at("model.layers.1.attn.v_proj.bias"), (std::vector<int64_t>{16}));
  EXPECT_EQ(shapes.count("model.layers.1.attn.o_proj.bias"), 0u);  // fla: o_proj never has one
  EXPECT_EQ(shapes.at("model.layers.1.attn.q_norm.weight"), (std::vector<int64_t>{8}));
  EXPECT_EQ(shapes.at("model.layers.1.attn.k_norm.weight"), (std::vector<int64_t>{8}));
}

// flame's transformer_340M.json: hidden d = 1024, 24 layers, 16 heads (no GQA), vocab 32000,
// untied, MLP 2816 = 256·ceil(int(1024·4·2/3) / 256) = 256·ceil(2730 / 256).
// fla's count, from fla/layers/attn.py and fla/models/transformer/modeling_transformer.py:
//   per layer  q, k, v, o      4 · 1024 · 1024     =  4,194,304
//              gate, up, down  3 · 1024 · 2816     =  8,650,752
//              attn_norm, mlp_norm  2 · 1024       =      2,048   -> 12,847,104
//   24 layers                                                     -> 308,330,496
//   embeddings + lm_head  2 · 32000 · 1024 = 65,536,000; final norm 1,024
//   total 373,867,520
TEST(TransformerModel, The340MConfigHasFlaNamesAndParameterCount) {
  const absl::StatusOr<ModelConfig> config =
      LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/transformer_340M.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  const auto model = MakeTransformerLm(*config);  // not initialised: only names and sizes matter
  EXPECT_EQ(CountParameters(*model), 373'867'520);

  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {32000, 1024}},
      {"model.norm.weight", {1024}},
      {"lm_head.weight", {32000, 1024}}};
  for (int i = 0; i < 24; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    expected[p + "attn_norm.weight"] = {1024};
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      expected[absl::StrCat(p, "attn.", proj, ".weight")] = {1024, 1024};
    }
    expected[p + "mlp_norm.weight"] = {1024};
    expected[p + "mlp.gate_proj.weight"] = {2816, 1024};
    expected[p + "mlp.up_proj.weight"] = {2816, 1024};
    expected[p + "mlp.down_proj.weight"] = {1024, 2816};
  }
  EXPECT_EQ(ParameterShapes(*model), expected);
}

TEST(TransformerModel, TreatsPackedSegmentsAsSeparateSequencesWithRestartedPositions) {
  ModelConfig config = TinyConfig();
  config.transformer.qk_norm = true;
  config.transformer.qkv_bias = true;
  const auto model = BuildCausalLm(config, 3);
  // qkv biases start at zero; make them matter.
  for (auto& item : model->named_parameters()) {
    if (item.key().find("bias") != std::string::npos) {
      torch::NoGradGuard no_grad;
      item.value().normal_(0, 0.5);
    }
  }
  ExpectPackedRowMatchesSeparateSequences(*model, 50, {0, 30, 31, 100});
}

TEST(TransformerModel, PackedSegmentsWithASlidingWindow) {
  ModelConfig config = TinyConfig();
  config.transformer.window_size = 7;
  ExpectPackedRowMatchesSeparateSequences(*BuildCausalLm(config, 4), 50, {0, 12, 40});
}

TEST(TransformerModel, LaterTokensDoNotChangeEarlierLogits) {
  ExpectCausal(*BuildCausalLm(TinyConfig(), 5), 50, 40, 17);
}

TEST(TransformerModel, ASlidingWindowBoundsWhatOneLayerSees) {
  ModelConfig config = TinyConfig();
  config.num_hidden_layers = 1;
  config.transformer.window_size = 4;
  const auto model = BuildCausalLm(config, 6);
  model->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, 50, {1, 12}, torch::kLong);
  torch::Tensor changed = ids.clone();
  changed[0][0] = (ids[0][0].item<int64_t>() + 1) % 50;
  const torch::Tensor a = model->Forward(ids, {}).logits, b = model->Forward(changed, {}).logits;
  // Token 0 reaches positions 0..3 (window 4) and nothing after them.
  EXPECT_GT(MaxDifference(a.narrow(1, 3, 1), b.narrow(1, 3, 1)), 1e-6);
  EXPECT_LT(MaxDifference(a.narrow(1, 4, 8), b.narrow(1, 4, 8)), 1e-12);
}

TEST(TransformerModel, TrainsThroughEveryParameterWithFlasLabelShift) {
  const auto model = BuildCausalLm(TinyConfig(), 1);
  const torch::Tensor ids = torch::randint(0, 50, {3, 20}, torch::kLong);
  torch::Tensor labels = torch::randint(0, 50, {3, 20}, torch::kLong);
  labels.narrow(1, 15, 5).fill_(kIgnoreIndex);
  const CausalLmOutput out = model->Forward(ids, labels);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{3, 20, 50}));
  // Position t predicts labels[t + 1]; targets 15.. are ignored, so positions 0..13 count.
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      out.logits.narrow(1, 0, 14).reshape({-1, 50}), labels.narrow(1, 1, 14).reshape({-1}));
  EXPECT_NEAR(out.loss.item<double>(), expected.item<double>(), 1e-6);
  EXPECT_NEAR(out.loss.item<double>(), std::log(50.0), 0.1);  // near uniform when untrained
  out.loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
  }
}

TEST(TransformerModel, InitialisesLikeFla) {
  ModelConfig config = TinyConfig();
  config.hidden_size = 128;
  config.initializer_range = 0.05;
  config.transformer.qkv_bias = true;
  config.transformer.qk_norm = true;
  const auto a = BuildCausalLm(config, 42), b = BuildCausalLm(config, 42);
  const auto params_b = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    EXPECT_TRUE(torch::equal(p, params_b[name])) << name;
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::all(p == 1).item<bool>()) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(torch::all(p == 0).item<bool>()) << name;
    } else {
      EXPECT_NEAR(p.std().item<double>(), 0.05, 0.01) << name;
    }
  }
}

}  // namespace
}  // namespace flame::worker::model
