#include "worker/checkpoint/model_weights.h"

#include <torch/torch.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

constexpr char kEmbeddings[] = "model.embeddings.weight";
constexpr char kLmHead[] = "lm_head.weight";

absl::StatusOr<std::string> SafetensorsDtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return std::string("F32");
    case torch::kFloat16:
      return std::string("F16");
    case torch::kBFloat16:
      return std::string("BF16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot store dtype ", c10::toString(dtype), " (F32, F16 or BF16 only)"));
  }
}

// Weights are floating point; other dtypes in a weights file mean a foreign or damaged file.
absl::StatusOr<torch::ScalarType> TorchDtype(const std::string& dtype, const std::string& what) {
  if (dtype == "F32") return torch::kFloat32;
  if (dtype == "F16") return torch::kFloat16;
  if (dtype == "BF16") return torch::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has dtype ", dtype, "; weights must be F32, F16 or BF16"));
}

// The file's tensor as a Torch tensor of its own dtype. Copied out of the file buffer: the data
// section is not guaranteed to be aligned for the element type.
absl::StatusOr<torch::Tensor> FileTensor(const safetensors::File& file, const std::string& name,
                                         const std::string& source) {
  const safetensors::TensorInfo& info = file.tensors().at(name);
  FLAME_ASSIGN_OR_RETURN(const torch::ScalarType dtype,
                         TorchDtype(info.dtype, absl::StrCat(source, ": tensor ", name)));
  torch::Tensor tensor = torch::empty(info.shape, torch::TensorOptions().dtype(dtype));
  std::memcpy(tensor.data_ptr(), file.Data(name), static_cast<size_t>(info.end - info.begin));
  return tensor;
}

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<torch::ScalarType> ParseExportDtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("export dtype must be float32, bfloat16 or float16 (got \"", name, "\")"));
}

absl::Status SaveModelWeights(torch::nn::Module& model, const std::string& path,
                              torch::ScalarType dtype) {
  FLAME_ASSIGN_OR_RETURN(const std::string name, SafetensorsDtype(dtype));
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> keep_alive;  // the cast copies the writer reads from
  std::vector<safetensors::TensorToWrite> tensors;
  for (const auto& item : model.named_parameters()) {
    torch::Tensor t = item.value().detach().to(torch::kCPU, dtype).contiguous();
    tensors.push_back(
        {item.key(), name, t.sizes().vec(), t.data_ptr(), static_cast<int64_t>(t.nbytes())});
    keep_alive.push_back(std::move(t));
  }
  return safetensors::Write(path, tensors, {{"format", "pt"}});
}

absl::Status LoadModelWeights(const safetensors::File& file, const std::string& source,
                              torch::nn::Module& model) {
  auto parameters = model.named_parameters();
  const bool tied = parameters.contains(kEmbeddings) && !parameters.contains(kLmHead);
  std::vector<std::string> missing, unexpected;
  for (const auto& item : parameters) {
    if (!file.tensors().contains(item.key())) missing.push_back(item.key());
  }
  for (const auto& [name, info] : file.tensors()) {
    if (!parameters.contains(name) && !(tied && name == kLmHead)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string message = absl::StrCat(source, ": does not match the model:");
    if (!missing.empty()) absl::StrAppend(&message, " missing ", absl::StrJoin(missing, ", "), ";");
    if (!unexpected.empty()) {
      absl::StrAppend(&message, " unexpected ", absl::StrJoin(unexpected, ", "), ";");
    }
    message.pop_back();
    return absl::InvalidArgumentError(message);
  }
  // Check everything before changing anything: a failed load leaves the model as it was.
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& [name, info] : file.tensors()) {
    const torch::Tensor& target =
        parameters.contains(name) ? parameters[name] : parameters[kEmbeddings];
    if (info.shape != target.sizes().vec()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": tensor ", name, " has shape ",
                                                     Shape(info.shape), ", the model needs ",
                                                     Shape(target.sizes().vec())));
    }
    FLAME_ASSIGN_OR_RETURN(torch::Tensor tensor, FileTensor(file, name, source));
    loaded[name] = tensor.to(target.dtype());
  }
  if (tied && loaded.contains(kLmHead)) {
    if (!torch::equal(loaded[kLmHead], loaded[kEmbeddings])) {
      return absl::InvalidArgumentError(
          absl::StrCat(source,
                       ": lm_head.weight differs from model.embeddings.weight, but the "
                       "model ties them (tie_word_embeddings = true)"));
    }
    loaded.erase(kLmHead);
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : loaded) parameters[name].copy_(tensor);
  return absl::OkStatus();
}

absl::Status LoadModelWeights(const std::string& path, torch::nn::Module& model) {
  FLAME_ASSIGN_OR_RETURN(const safetensors::File file, safetensors::Read(path));
  return LoadModelWeights(file, path, model);
}

}  // namespace flame::worker
