#include "worker/checkpoint/exporter.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/checkpoint/checkpoint_store.h"
#include "worker/checkpoint/model_weights.h"
#include "worker/checkpoint/safetensors.h"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kEmbeddings[] = "model.embeddings.weight";
// The reference ids: two rows that cross a chunk boundary (64) and end inside a chunk.
constexpr int64_t kReferenceRows = 2, kReferenceLength = 100;
constexpr uint64_t kReferenceSeed = 20240611;

// The vocabulary a checkpoint was trained with: the rows of its embedding matrix.
absl::StatusOr<int64_t> TrainedVocabSize(const std::string& dir) {
  if (PathExists(dir + "/model.safetensors")) {
    FLAME_ASSIGN_OR_RETURN(const safetensors::File file,
                           safetensors::Read(dir + "/model.safetensors"));
    const auto it = file.tensors().find(kEmbeddings);
    if (it == file.tensors().end() || it->second.shape.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/model.safetensors has no 2-D ", kEmbeddings));
    }
    return it->second.shape[0];
  }
  // A LibTorch module archive nests one archive per submodule: model -> embeddings -> weight.
  try {
    torch::serialize::InputArchive archive, model, embeddings;
    archive.load_from(dir + "/model.pt");
    torch::Tensor weight;
    if (archive.try_read("model", model) && model.try_read("embeddings", embeddings) &&
        embeddings.try_read("weight", weight) && weight.dim() == 2) {
      return weight.size(0);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/model.pt: ", e.what()));
  }
  return absl::InvalidArgumentError(absl::StrCat(dir, "/model.pt has no 2-D ", kEmbeddings));
}

// NumPy's .npy format, version 1.0: magic, header length, a Python dict literal padded so the
// data starts 64-byte aligned, then the raw little-endian array in C order.
absl::Status WriteNpy(const std::string& path, const torch::Tensor& tensor, const char* descr) {
  std::vector<std::string> dims;
  for (int64_t d : tensor.sizes()) dims.push_back(std::to_string(d));
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                    absl::StrJoin(dims, ", "), dims.size() == 1 ? ",), }" : "), }");
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  const torch::Tensor data = tensor.contiguous();
  bytes.append(static_cast<const char*>(data.data_ptr()), data.nbytes());
  return WriteFileAtomically(path, bytes);
}

// config.json as given, with what training changed.
absl::StatusOr<std::string> ExportedConfig(const std::string& path, int64_t vocab_size,
                                           const std::string& dtype) {
  FLAME_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return absl::InvalidArgumentError(path + ": not a JSON object");
  config["vocab_size"] = vocab_size;
  config["torch_dtype"] = dtype;
  return config.dump(2) + "\n";
}

absl::Status CopyTokenizer(const std::string& tokenizer, const std::string& output) {
  if (!PathExists(tokenizer)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", tokenizer, " does not exist"));
  }
  // HF's Llama tokenizers look for tokenizer.model; tokenizer.json is found by its own name.
  const fs::path source(tokenizer);
  const std::string name =
      source.extension() == ".model" ? "tokenizer.model" : source.filename().string();
  FLAME_ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(tokenizer));
  return WriteFileAtomically(absl::StrCat(output, "/", name), bytes);
}

}  // namespace

absl::StatusOr<std::shared_ptr<model::CausalLm>> LoadCheckpointModel(const std::string& dir,
                                                                     ModelConfig config) {
  FLAME_RETURN_IF_ERROR(CheckpointStore::VerifyDirectory(dir));
  FLAME_ASSIGN_OR_RETURN(const int64_t vocab, TrainedVocabSize(dir));
  if (vocab != config.vocab_size) {
    FLAME_LOG(INFO) << "the checkpoint was trained with vocab_size " << vocab
                    << " (config: " << config.vocab_size << ")";
    config.vocab_size = vocab;
  }
  std::shared_ptr<model::CausalLm> model = model::BuildCausalLm(config, /*seed=*/0);
  CheckpointComponents parts;
  parts.optimizer = false;
  parts.train_state = false;  // leaves this process's generator alone
  CheckpointState state;
  FLAME_RETURN_IF_ERROR(
      CheckpointStore::LoadDirectory(dir, parts, &state, *model, /*optimizer=*/nullptr));
  return model;
}

absl::Status ExportCheckpoint(const ExportRequest& request) {
  FLAME_ASSIGN_OR_RETURN(const torch::ScalarType dtype, ParseExportDtype(request.dtype));
  if (!CheckpointStore::IsCheckpointDirectory(request.checkpoint)) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.checkpoint, " is not a checkpoint folder (no manifest.json)"));
  }
  FLAME_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(request.model_config));
  FLAME_ASSIGN_OR_RETURN(std::shared_ptr<model::CausalLm> model,
                         LoadCheckpointModel(request.checkpoint, config));
  // LoadCheckpointModel sized the model to the checkpoint's vocabulary.
  const int64_t vocab = model->named_parameters()[kEmbeddings].size(0);
  FLAME_ASSIGN_OR_RETURN(const std::string config_json,
                         ExportedConfig(request.model_config, vocab, request.dtype));

  FLAME_RETURN_IF_ERROR(MakeDirectories(request.output));
  const std::string weights = request.output + "/model.safetensors";
  FLAME_RETURN_IF_ERROR(SaveModelWeights(*model, weights, dtype));
  FLAME_RETURN_IF_ERROR(WriteFileAtomically(request.output + "/config.json", config_json));
  if (!request.tokenizer.empty()) {
    FLAME_RETURN_IF_ERROR(CopyTokenizer(request.tokenizer, request.output));
  }
  if (request.reference_logits) {
    // The reference uses the weights as exported (rounded to the dtype), read back from disk.
    FLAME_RETURN_IF_ERROR(LoadModelWeights(weights, *model));
    FLAME_RETURN_IF_ERROR(WriteReferenceLogits(*model, vocab, request.output));
  }
  return absl::OkStatus();
}

bool IsHfFolder(const std::string& dir) {
  return PathExists(dir + "/model.safetensors") && PathExists(dir + "/config.json");
}

absl::Status ImportHfFolder(const std::string& dir, torch::nn::Module& model) {
  if (!IsHfFolder(dir)) {
    const bool sharded = PathExists(dir + "/model.safetensors.index.json");
    return absl::InvalidArgumentError(absl::StrCat(
        dir, sharded ? " holds sharded safetensors (model.safetensors.index.json), which are not "
                       "supported; save the model unsharded"
                     : " is neither a checkpoint folder (manifest.json) nor an HF-style folder "
                       "(model.safetensors and config.json)"));
  }
  return LoadModelWeights(dir + "/model.safetensors", model);
}

absl::Status WriteReferenceLogits(model::CausalLm& model, int64_t vocab_size,
                                  const std::string& dir) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(kReferenceSeed);
  const torch::Tensor ids = torch::randint(0, vocab_size, {kReferenceRows, kReferenceLength},
                                           generator, torch::kInt64);  // [B, T]
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    const bool was_training = model.is_training();
    model.eval();
    logits = model.Forward(ids, /*labels=*/{}).logits.to(torch::kFloat32);  // [B, T, V]
    model.train(was_training);
  }
  FLAME_RETURN_IF_ERROR(WriteNpy(dir + "/input_ids.npy", ids, "<i8"));
  return WriteNpy(dir + "/expected_logits.npy", logits, "<f4");
}

}  // namespace flame::worker
