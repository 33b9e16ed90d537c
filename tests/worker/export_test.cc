// Export of a checkpoint to safetensors + config.json with fla's names, and import back: the
// round trip is exact, tied models are written as HF writes them, and a file that does not fit
// the model fails with an error naming the tensor.
//
// Other model families plug into the round trip by adding their config path to
// kRoundTripConfigs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "common/files.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "worker/checkpoint/checkpoint_store.h"
#include "worker/checkpoint/exporter.h"
#include "worker/checkpoint/model_weights.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/export_command.h"
#include "worker/optim/optimizer.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;
using testing::SourcePath;
using testing::TempDir;

// An export of `checkpoint` with the model config `config` into `output`.
ExportRequest MakeRequest(const std::string& checkpoint, const std::string& config,
                          const std::string& output, const std::string& dtype = "float32") {
  ExportRequest request;
  request.checkpoint = checkpoint;
  request.model_config = config;
  request.output = output;
  request.dtype = dtype;
  return request;
}

const char* const kRoundTripConfigs[] = {
    "configs/models/gla_tiny.json",       "configs/models/transformer_tiny.json",
    "configs/models/retnet_tiny.json",    "configs/models/delta_net_tiny.json",
    "configs/models/gated_deltanet_tiny.json"};

ModelConfig LoadConfig(const std::string& path) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(path);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig{};
}

// Writes `config_path` with `changes` applied to `dir`/config.json and returns the new path.
std::string ChangedConfig(const std::string& config_path, const Json& changes,
                          const std::string& dir) {
  Json config = Json::parse(*ReadFileToString(config_path));
  config.update(changes);
  const std::string path = dir + "/config.json";
  std::ofstream(path) << config.dump(2);
  return path;
}

// A trained-looking checkpoint: step-3 of a model with seed 7 (and its optimizer) under `root`.
std::shared_ptr<model::CausalLm> SaveCheckpoint(const ModelConfig& config,
                                                const std::string& root) {
  std::shared_ptr<model::CausalLm> model = model::BuildCausalLm(config, 7);
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      BuildOptimizer(OptimizerConfig{}, model->parameters());
  CheckpointState state;
  state.train_state.step = 3;
  state.data_positions = {"{}"};
  EXPECT_TRUE(CheckpointStore(root).Save(state, *model, *optimizer).ok());
  return model;
}

torch::Tensor Logits(model::CausalLm& model, int64_t vocab) {
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::arange(0, 2 * 70, torch::kInt64).remainder(vocab).view({2, 70});
  return model.Forward(ids, {}).logits;
}

class ExportRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(ExportRoundTrip, ImportGivesBitwiseIdenticalLogits) {
  TempDir dir;
  const std::string config_path = SourcePath(GetParam());
  const ModelConfig config = LoadConfig(config_path);
  const std::shared_ptr<model::CausalLm> trained = SaveCheckpoint(config, dir.path());

  ExportRequest request;
  request.checkpoint = dir.path() + "/step-3";
  request.model_config = config_path;
  request.output = dir.path() + "/export";
  request.tokenizer = testing::DemoData("fortunes.model");
  ASSERT_TRUE(ExportCheckpoint(request).ok());
  EXPECT_TRUE(PathExists(request.output + "/tokenizer.model"));
  const Json exported = Json::parse(*ReadFileToString(request.output + "/config.json"));
  EXPECT_EQ(exported["vocab_size"], config.vocab_size);
  EXPECT_EQ(exported["model_type"], config.model_type);
  EXPECT_EQ(exported["torch_dtype"], "float32");

  // Every parameter is in the file under its fla name, in float32.
  const absl::StatusOr<safetensors::File> file =
      safetensors::Read(request.output + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->tensors().size(), trained->named_parameters().size());
  EXPECT_EQ(file->tensors().at("model.embeddings.weight").dtype, "F32");

  std::shared_ptr<model::CausalLm> imported = model::BuildCausalLm(config, 99);
  ASSERT_TRUE(ImportHfFolder(request.output, *imported).ok());
  EXPECT_TRUE(
      torch::equal(Logits(*trained, config.vocab_size), Logits(*imported, config.vocab_size)));
}

INSTANTIATE_TEST_SUITE_P(Families, ExportRoundTrip, ::testing::ValuesIn(kRoundTripConfigs));

TEST(Export, TiedModelsStoreTheEmbeddingOnceAndAcceptAnExplicitLmHead) {
  TempDir dir;
  const std::string config_path = ChangedConfig(SourcePath("configs/models/gla_tiny.json"),
                                                {{"tie_word_embeddings", true}}, dir.path());
  const ModelConfig config = LoadConfig(config_path);
  const std::shared_ptr<model::CausalLm> trained = SaveCheckpoint(config, dir.path());
  ExportRequest request = MakeRequest(dir.path() + "/step-3", config_path, dir.path() + "/export");
  ASSERT_TRUE(ExportCheckpoint(request).ok());
  const safetensors::File file = *safetensors::Read(request.output + "/model.safetensors");
  EXPECT_TRUE(file.tensors().contains("model.embeddings.weight"));
  EXPECT_FALSE(file.tensors().contains("lm_head.weight"));  // as save_pretrained of a tied model

  // Some exporters also write lm_head.weight for a tied model: equal to the embedding, it loads.
  std::vector<torch::Tensor> keep;
  std::vector<safetensors::TensorToWrite> tensors;
  for (const auto& item : trained->named_parameters()) {
    keep.push_back(item.value().detach().contiguous());
    tensors.push_back({item.key(), "F32", keep.back().sizes().vec(), keep.back().data_ptr(),
                       static_cast<int64_t>(keep.back().nbytes())});
    if (item.key() == "model.embeddings.weight") {
      tensors.push_back({"lm_head.weight", "F32", keep.back().sizes().vec(), keep.back().data_ptr(),
                         static_cast<int64_t>(keep.back().nbytes())});
    }
  }
  const std::string both = dir.path() + "/both.safetensors";
  ASSERT_TRUE(safetensors::Write(both, tensors, {}).ok());
  std::shared_ptr<model::CausalLm> imported = model::BuildCausalLm(config, 99);
  ASSERT_TRUE(LoadModelWeights(both, *imported).ok());
  EXPECT_TRUE(
      torch::equal(Logits(*trained, config.vocab_size), Logits(*imported, config.vocab_size)));
}

TEST(Export, Bfloat16ExportHoldsTheRoundedWeights) {
  TempDir dir;
  const std::string config_path = SourcePath("configs/models/gla_tiny.json");
  const ModelConfig config = LoadConfig(config_path);
  const std::shared_ptr<model::CausalLm> trained = SaveCheckpoint(config, dir.path());
  ExportRequest request =
      MakeRequest(dir.path() + "/step-3", config_path, dir.path() + "/export", "bfloat16");
  ASSERT_TRUE(ExportCheckpoint(request).ok());
  const safetensors::File file = *safetensors::Read(request.output + "/model.safetensors");
  EXPECT_EQ(file.tensors().at("lm_head.weight").dtype, "BF16");
  EXPECT_EQ(Json::parse(*ReadFileToString(request.output + "/config.json"))["torch_dtype"],
            "bfloat16");
  // Imported into a float32 model: exactly the bf16-rounded weights, cast up.
  std::shared_ptr<model::CausalLm> imported = model::BuildCausalLm(config, 99);
  ASSERT_TRUE(LoadModelWeights(file, "bf16", *imported).ok());
  auto expected = trained->named_parameters();
  for (const auto& item : imported->named_parameters()) {
    EXPECT_EQ(item.value().dtype(), torch::kFloat32);
    EXPECT_TRUE(
        torch::equal(item.value(), expected[item.key()].to(torch::kBFloat16).to(torch::kFloat32)))
        << item.key();
  }
}

// Writes the model's parameters with `edit` applied to the list first.
std::string WriteEdited(model::CausalLm& model, const std::string& path,
                        const std::function<void(std::vector<safetensors::TensorToWrite>*)>& edit,
                        std::vector<torch::Tensor>* keep) {
  std::vector<safetensors::TensorToWrite> tensors;
  for (const auto& item : model.named_parameters()) {
    keep->push_back(item.value().detach().contiguous());
    tensors.push_back({item.key(), "F32", keep->back().sizes().vec(), keep->back().data_ptr(),
                       static_cast<int64_t>(keep->back().nbytes())});
  }
  edit(&tensors);
  EXPECT_TRUE(safetensors::Write(path, tensors, {}).ok());
  return path;
}

void ExpectImportFails(model::CausalLm& source, const std::string& path,
                       const std::function<void(std::vector<safetensors::TensorToWrite>*)>& edit,
                       const std::vector<std::string>& needles) {
  std::vector<torch::Tensor> keep;
  WriteEdited(source, path, edit, &keep);
  const ModelConfig config = LoadConfig(SourcePath("configs/models/gla_tiny.json"));
  std::shared_ptr<model::CausalLm> target = model::BuildCausalLm(config, 99);
  const torch::Tensor before = target->named_parameters()["lm_head.weight"].clone();
  const absl::Status status = LoadModelWeights(path, *target);
  ASSERT_FALSE(status.ok());
  for (const std::string& needle : needles) {
    EXPECT_NE(status.message().find(needle), std::string::npos) << status;
  }
  // A refused file changes nothing.
  EXPECT_TRUE(torch::equal(before, target->named_parameters()["lm_head.weight"]));
}

TEST(Import, RefusesMissingUnexpectedMisshapenAndUnknownDtypeTensors) {
  TempDir dir;
  const ModelConfig config = LoadConfig(SourcePath("configs/models/gla_tiny.json"));
  std::shared_ptr<model::CausalLm> source = model::BuildCausalLm(config, 7);
  const std::string path = dir.path() + "/m.safetensors";
  const std::string o_proj = "model.layers.1.attn.o_proj.weight";
  ExpectImportFails(*source, path,
                    [&](auto* tensors) {
                      std::erase_if(*tensors, [&](const auto& t) { return t.name == o_proj; });
                    },
                    {"missing", o_proj});
  ExpectImportFails(*source, path,
                    [&](auto* tensors) {
                      tensors->push_back(tensors->front());
                      tensors->back().name = "model.layers.9.extra.weight";
                    },
                    {"unexpected", "model.layers.9.extra.weight"});
  const std::string k_proj = "model.layers.0.attn.k_proj.weight";  // [64, 128]
  ExpectImportFails(*source, path,
                    [&](auto* tensors) {
                      for (auto& t : *tensors) {
                        if (t.name == k_proj) t.shape = {t.shape[1], t.shape[0]};  // transposed
                      }
                    },
                    {k_proj, "shape [128, 64]", "needs [64, 128]"});
  ExpectImportFails(*source, path,
                    [&](auto* tensors) {
                      for (auto& t : *tensors) {
                        if (t.name == "model.norm.weight")
                          t.dtype = "I32";  // same byte count, not weights
                      }
                    },
                    {"model.norm.weight", "dtype I32"});
}

// After the .npy magic, version and length comes the header dict; the data follows.
std::string NpyHeader(const std::string& bytes, size_t* data_start) {
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t length = static_cast<unsigned char>(bytes[8]) |
                        (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  *data_start = 10 + length;
  EXPECT_EQ(*data_start % 64, 0u);
  return bytes.substr(10, length);
}

TEST(Export, WritesReferenceLogitsForTheFlaLoadCheck) {
  TempDir dir;
  const std::string config_path = SourcePath("configs/models/gla_tiny.json");
  const ModelConfig config = LoadConfig(config_path);
  const std::shared_ptr<model::CausalLm> trained = SaveCheckpoint(config, dir.path());
  ExportRequest request = MakeRequest(dir.path() + "/step-3", config_path, dir.path() + "/export");
  request.reference_logits = true;
  ASSERT_TRUE(ExportCheckpoint(request).ok());
  size_t ids_start = 0, logits_start = 0;
  const std::string ids = *ReadFileToString(request.output + "/input_ids.npy");
  const std::string logits = *ReadFileToString(request.output + "/expected_logits.npy");
  const std::string ids_header = NpyHeader(ids, &ids_start);
  const std::string logits_header = NpyHeader(logits, &logits_start);
  EXPECT_NE(ids_header.find("'descr': '<i8'"), std::string::npos) << ids_header;
  EXPECT_NE(ids_header.find("'shape': (2, 100)"), std::string::npos) << ids_header;
  EXPECT_NE(logits_header.find("'shape': (2, 100, 2048)"), std::string::npos) << logits_header;
  ASSERT_EQ(ids.size() - ids_start, 2u * 100 * 8);
  ASSERT_EQ(logits.size() - logits_start, 2u * 100 * 2048 * 4);
  // The logits are our model's for those ids.
  const torch::Tensor id_tensor =
      torch::from_blob(const_cast<char*>(ids.data() + ids_start), {2, 100}, torch::kInt64).clone();
  const torch::Tensor expected = torch::from_blob(const_cast<char*>(logits.data() + logits_start),
                                                  {2, 100, 2048}, torch::kFloat32)
                                     .clone();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(trained->Forward(id_tensor, {}).logits, expected));
}

TEST(ExportCommand, ExitsTwoWithAMessageOnBadInputAndZeroOnSuccess) {
  TempDir dir;
  const std::string config_path = SourcePath("configs/models/gla_tiny.json");
  SaveCheckpoint(LoadConfig(config_path), dir.path());
  const std::string step = dir.path() + "/step-3", out = dir.path() + "/out";
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return RunExportCommand(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_EQ(run({"export", "--checkpoint", step, "--config", config_path}), 2);  // no --output
  EXPECT_EQ(run({"export", "--checkpoint", step, "--config", config_path, "--output", out,
                 "--dtype", "int8"}),
            2);
  EXPECT_EQ(run({"export", "--checkpoint", dir.path(), "--config", config_path, "--output", out}),
            2);  // not a step-N folder
  EXPECT_EQ(run({"export", "--bogus", "1"}), 2);
  EXPECT_FALSE(PathExists(out + "/model.safetensors"));
  EXPECT_EQ(run({"export", "--checkpoint", step, "--config", config_path, "--output=" + out,
                 "--dtype", "bfloat16"}),
            0);
  EXPECT_TRUE(PathExists(out + "/model.safetensors"));
  EXPECT_TRUE(PathExists(out + "/config.json"));
}

}  // namespace
}  // namespace flame::worker
