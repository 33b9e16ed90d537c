// The RetNet family: fla's parameter names, shapes and counts (the 340M config included), packed
// rows, causality, the label shift and initialisation. The retention op itself is checked
// against the recurrence in retention_op_test.cc.
#include "worker/model/retnet_model.h"

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
using testing::ParameterShapes;

// hidden 32, 2 heads, key dim 32 (expand_k 1), value dim 64 (expand_v 2), head dims 16 and 32,
// MLP 256 (hidden_ratio 2: 256·ceil(int(32·2·2/3) / 256)).
ModelConfig TinyConfig() {
  ModelConfig config;
  config.model_type = "retnet";
  config.family = ModelFamily::kRetNet;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.vocab_size = 50;
  config.hidden_ratio = 2;
  config.retnet.num_heads = 2;
  config.retnet.num_kv_heads = 2;
  return config;
}

TEST(RetNetModel, UsesFlaParameterNamesAndShapes) {
  ModelConfig config = TinyConfig();
  config.num_hidden_layers = 1;
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {50, 32}},
      {"model.layers.0.attn_norm.weight", {32}},
      {"model.layers.0.attn.q_proj.weight", {32, 32}},
      {"model.layers.0.attn.k_proj.weight", {32, 32}},
      {"model.layers.0.attn.v_proj.weight", {64, 32}},
      {"model.layers.0.attn.g_proj.weight", {64, 32}},
      {"model.layers.0.attn.o_proj.weight", {32, 64}},
      {"model.layers.0.attn.g_norm_swish_gate.weight", {32}},  // per head: dv = 32
      {"model.layers.0.mlp_norm.weight", {32}},
      {"model.layers.0.mlp.gate_proj.weight", {256, 32}},
      {"model.layers.0.mlp.up_proj.weight", {256, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 256}},
      {"model.norm.weight", {32}},
      {"lm_head.weight", {50, 32}},
  };
  EXPECT_EQ(ParameterShapes(*BuildCausalLm(config, 0)), expected);
}

TEST(RetNetModel, NamesTheNormGNormWithoutFusedNormOrGateAndSharesKvHeads) {
  ModelConfig config = TinyConfig();
  config.fuse_norm = false;
  config.retnet.num_heads = 4;
  config.retnet.num_kv_heads = 2;
  auto shapes = ParameterShapes(*BuildCausalLm(config, 0));
  EXPECT_EQ(shapes.at("model.layers.0.attn.g_norm.weight"), (std::vector<int64_t>{16}));
  EXPECT_EQ(shapes.count("model.layers.0.attn.g_norm_swish_gate.weight"), 0u);
  EXPECT_EQ(shapes.at("model.layers.0.attn.k_proj.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.attn.v_proj.weight"), (std::vector<int64_t>{32, 32}));

  config = TinyConfig();
  config.retnet.use_output_gate = false;
  shapes = ParameterShapes(*BuildCausalLm(config, 0));
  EXPECT_EQ(shapes.count("model.layers.0.attn.g_proj.weight"), 0u);
  EXPECT_EQ(shapes.count("model.layers.0.attn.g_norm.weight"), 1u);
}

// retnet_340M.json: hidden d = 1024, 24 layers, 4 heads, expand_k 1 (Dk = 1024), expand_v 2
// (Dv = 2048, dv = 512), hidden_ratio 2 -> MLP 1536 = 256·ceil(int(1024·2·2/3) / 256)
// = 256·ceil(1365 / 256), tied embeddings, vocab 32000.
// fla's count, from fla/layers/multiscale_retention.py and fla/models/retnet/modeling_retnet.py:
//   per layer  q, k  2 · 1024 · 1024; v, g  2 · 1024 · 2048; o  2048 · 1024   =  8,388,608
//              g_norm_swish_gate  512
//              gate, up, down  3 · 1024 · 1536                                 =  4,718,592
//              attn_norm, mlp_norm  2 · 1024                                   =      2,048
//                                                                   per layer -> 13,109,760
//   24 layers                                                                  -> 314,634,240
//   embeddings 32000 · 1024 = 32,768,000 (lm_head tied: no parameter); final norm 1,024
//   total 347,403,264
TEST(RetNetModel, The340MConfigHasFlaNamesAndParameterCount) {
  const absl::StatusOr<ModelConfig> config =
      LoadModelConfig(absl::StrCat(FLAME_SOURCE_DIR, "/configs/models/retnet_340M.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  const auto model = MakeRetNetLm(*config);  // not initialised: only names and sizes matter
  EXPECT_EQ(CountParameters(*model), 347'403'264);

  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embeddings.weight", {32000, 1024}}, {"model.norm.weight", {1024}}};
  for (int i = 0; i < 24; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    expected[p + "attn_norm.weight"] = {1024};
    expected[p + "attn.q_proj.weight"] = {1024, 1024};
    expected[p + "attn.k_proj.weight"] = {1024, 1024};
    expected[p + "attn.v_proj.weight"] = {2048, 1024};
    expected[p + "attn.g_proj.weight"] = {2048, 1024};
    expected[p + "attn.o_proj.weight"] = {1024, 2048};
    expected[p + "attn.g_norm_swish_gate.weight"] = {512};
    expected[p + "mlp_norm.weight"] = {1024};
    expected[p + "mlp.gate_proj.weight"] = {1536, 1024};
    expected[p + "mlp.up_proj.weight"] = {1536, 1024};
    expected[p + "mlp.down_proj.weight"] = {1024, 1536};
  }
  EXPECT_EQ(ParameterShapes(*model), expected);
}

TEST(RetNetModel, TreatsPackedSegmentsAsSeparateSequences) {
  // Segments longer than one chunk (64), and one of a single token.
  ExpectPackedRowMatchesSeparateSequences(*BuildCausalLm(TinyConfig(), 3), 50, {0, 70, 71, 150});
}

TEST(RetNetModel, TreatsPackedSegmentsAsSeparateSequencesWithSharedKvHeads) {
  ModelConfig config = TinyConfig();
  config.retnet.num_heads = 4;
  config.retnet.num_kv_heads = 2;
  config.retnet.feature_map = "swish";
  config.fuse_norm = false;
  ExpectPackedRowMatchesSeparateSequences(*BuildCausalLm(config, 4), 50, {0, 20, 90});
}

TEST(RetNetModel, LaterTokensDoNotChangeEarlierLogits) {
  ExpectCausal(*BuildCausalLm(TinyConfig(), 5), 50, 100, 40);  // t inside the first chunk
  ExpectCausal(*BuildCausalLm(TinyConfig(), 5), 50, 100, 80);  // and inside the second
}

TEST(RetNetModel, TrainsThroughEveryParameterWithFlasLabelShift) {
  const auto model = BuildCausalLm(TinyConfig(), 1);
  const torch::Tensor ids = torch::randint(0, 50, {3, 20}, torch::kLong);
  torch::Tensor labels = torch::randint(0, 50, {3, 20}, torch::kLong);
  labels.narrow(1, 15, 5).fill_(kIgnoreIndex);
  const CausalLmOutput out = model->Forward(ids, labels);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{3, 20, 50}));
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      out.logits.narrow(1, 0, 14).reshape({-1, 50}), labels.narrow(1, 1, 14).reshape({-1}));
  EXPECT_NEAR(out.loss.item<double>(), expected.item<double>(), 1e-6);
  EXPECT_NEAR(out.loss.item<double>(), std::log(50.0), 0.1);
  out.loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0) << item.key();
  }
}

TEST(RetNetModel, InitialisesLikeFla) {
  ModelConfig config = TinyConfig();
  config.hidden_size = 128;
  config.initializer_range = 0.05;
  const auto a = BuildCausalLm(config, 42), b = BuildCausalLm(config, 42);
  const auto params_b = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    EXPECT_TRUE(torch::equal(p, params_b[name])) << name;
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::all(p == 1).item<bool>()) << name;
    } else {
      EXPECT_NEAR(p.std().item<double>(), 0.05, 0.01) << name;
    }
  }
}

}  // namespace
}  // namespace flame::worker::model
