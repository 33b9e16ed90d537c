#include "worker/checkpoint/checkpoint_store.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/checkpoint/model_weights.h"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kFormat[] = "flame-checkpoint-1";
constexpr char kManifest[] = "manifest.json";
constexpr char kRngFile[] = "rng.pt";
constexpr char kWeightsFile[] = "model.safetensors";

// Every file a checkpoint of each kind must have, besides the manifest.
const std::vector<std::string>& FilesOf(CheckpointKind kind) {
  static const std::vector<std::string> kFull = {"model.pt", "optimizer.pt", kRngFile,
                                                 "train_state.json", "data_positions.json"};
  static const std::vector<std::string> kWeightsOnly = {kWeightsFile, "train_state.json"};
  return kind == CheckpointKind::kFull ? kFull : kWeightsOnly;
}

const char* KindName(CheckpointKind kind) {
  return kind == CheckpointKind::kFull ? "full" : "weights_only";
}

absl::StatusOr<std::string> FileCrc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("read error in ", path));
  return absl::StrFormat("%08x", crc);
}

std::string StringCrc32(const std::string& bytes) {
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                          static_cast<uInt>(bytes.size()));
  return absl::StrFormat("%08x", crc);
}

// Runs a LibTorch (de)serialisation call; its exceptions are I/O or format errors here, which
// the environment controls, so they become a Status rather than crossing into the trainer.
template <typename Fn>
absl::Status TorchIo(const std::string& what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(what, ": ", e.what()));
  }
}

Json TrainStateJson(const CheckpointState& state) {
  const TrainState& t = state.train_state;
  return Json{{"step", t.step},
              {"tokens", t.tokens},
              {"skipped_steps", t.skipped_steps},
              {"elapsed_seconds", t.elapsed_seconds},
              {"lr_scheduler_steps", t.lr_scheduler_steps},
              {"spec_hash", state.spec_hash},
              {"world_size", state.world_size}};
}

absl::Status ParseTrainState(const std::string& text, CheckpointState* state) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  try {
    TrainState& t = state->train_state;
    t.step = json.at("step").get<int64_t>();
    t.tokens = json.at("tokens").get<int64_t>();
    t.skipped_steps = json.at("skipped_steps").get<int64_t>();
    t.elapsed_seconds = json.at("elapsed_seconds").get<double>();
    // Written since the LR schedule could be restored apart from the step; before, they agreed.
    t.lr_scheduler_steps = json.value("lr_scheduler_steps", t.step);
    state->spec_hash = json.at("spec_hash").get<std::string>();
    state->world_size = json.at("world_size").get<int64_t>();
  } catch (const Json::exception& e) {
    return absl::DataLossError(absl::StrCat("train_state.json: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, text);  // fsyncs the file (and its directory)
}

// The manifest of the files in `dir`: their sizes and checksums.
absl::StatusOr<std::string> BuildManifest(const std::string& dir, const CheckpointState& state,
                                          CheckpointKind kind) {
  Json files = Json::object();
  for (const std::string& name : FilesOf(kind)) {
    const std::string path = absl::StrCat(dir, "/", name);
    FLAME_ASSIGN_OR_RETURN(const int64_t bytes, FileSize(path));
    FLAME_ASSIGN_OR_RETURN(const std::string crc, FileCrc32(path));
    files[name] = Json{{"bytes", bytes}, {"crc32", crc}};
  }
  // The data positions are small JSON objects: the manifest carries them decoded, so that a
  // person (or flamectl) can see where each rank's data stood without opening other files.
  Json positions = Json::array();
  for (const std::string& encoded : state.data_positions) {
    Json position = Json::parse(encoded, nullptr, /*allow_exceptions=*/false);
    positions.push_back(position.is_discarded() ? Json(encoded) : position);
  }
  const Json manifest = {
      {"format", kFormat},
      {"kind", KindName(kind)},
      {"step", state.train_state.step},
      {"tokens", state.train_state.tokens},
      {"config_hash", state.spec_hash},
      {"world_size", state.world_size},
      {"data_positions", positions},
      {"rng", kind == CheckpointKind::kFull ? Json{{"generator", "cpu"}, {"file", kRngFile}}
                                            : Json(nullptr)},
      {"files", files}};
  return manifest.dump(2) + "\n";
}

// Writes everything but the manifest of a full checkpoint into `dir`, each file fsynced.
absl::Status WriteFullContents(const std::string& dir, const CheckpointState& state,
                               torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  const std::string model_path = dir + "/model.pt", optimizer_path = dir + "/optimizer.pt";
  const std::string rng_path = absl::StrCat(dir, "/", kRngFile);
  FLAME_RETURN_IF_ERROR(TorchIo("save model", [&] {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    archive.save_to(model_path);
  }));
  FLAME_RETURN_IF_ERROR(TorchIo("save optimizer", [&] {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to(optimizer_path);
  }));
  FLAME_RETURN_IF_ERROR(TorchIo("save rng", [&] {
    torch::save(at::detail::getDefaultCPUGenerator().get_state(), rng_path);
  }));
  for (const std::string& path : {model_path, optimizer_path, rng_path}) {
    FLAME_RETURN_IF_ERROR(SyncPath(path));
  }
  FLAME_RETURN_IF_ERROR(WriteText(dir + "/train_state.json", TrainStateJson(state).dump(2) + "\n"));
  return WriteText(dir + "/data_positions.json", Json(state.data_positions).dump() + "\n");
}

absl::Status WriteWeightsOnlyContents(const std::string& dir, const CheckpointState& state,
                                      torch::nn::Module& model, torch::ScalarType dtype) {
  FLAME_RETURN_IF_ERROR(SaveModelWeights(model, absl::StrCat(dir, "/", kWeightsFile), dtype));
  return WriteText(dir + "/train_state.json", TrainStateJson(state).dump(2) + "\n");
}

absl::StatusOr<Json> ReadManifest(const std::string& dir) {
  FLAME_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(dir + "/" + kManifest));
  const Json manifest = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || manifest.value("format", "") != kFormat ||
      !manifest.contains("files") || !manifest["files"].is_object()) {
    return absl::DataLossError(absl::StrCat(dir, ": manifest is not a ", kFormat, " manifest"));
  }
  const std::string kind = manifest.value("kind", "full");
  if (kind != "full" && kind != "weights_only") {
    return absl::DataLossError(absl::StrCat(dir, ": unknown checkpoint kind \"", kind, "\""));
  }
  return manifest;
}

CheckpointKind KindOf(const Json& manifest) {
  return manifest.value("kind", "full") == "full" ? CheckpointKind::kFull
                                                  : CheckpointKind::kWeightsOnly;
}

// Moves a finished temporary directory into place as `target`.
absl::Status Publish(const std::string& temporary, const std::string& target,
                     const std::string& root) {
  std::error_code error;
  if (fs::exists(target, error)) {
    // The same step saved again (a restarted attempt reached it twice): swap the old copy out
    // first, so that a crash in between still leaves one complete step-N or its replacement.
    const std::string old = absl::StrCat(temporary, ".old");
    fs::rename(target, old, error);
    if (error) return absl::InternalError(absl::StrCat("rename ", target, ": ", error.message()));
    fs::rename(temporary, target, error);
    std::error_code ignored;  // a leftover .old is removed by RemoveTemporaries later
    fs::remove_all(old, ignored);
  } else {
    fs::rename(temporary, target, error);
  }
  if (error) return absl::InternalError(absl::StrCat("rename to ", target, ": ", error.message()));
  return SyncPath(root);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string CheckpointStore::StepPath(int64_t step) const {
  return absl::StrCat(root_, "/step-", step);
}

absl::StatusOr<CheckpointInfo> CheckpointStore::SaveAs(
    const CheckpointState& state, CheckpointKind kind,
    const std::function<absl::Status(const std::string&)>& write_contents) {
  const int64_t step = state.train_state.step;
  const std::string temporary = absl::StrCat(root_, "/.step-", step, ".tmp-", ::getpid());
  std::error_code error;
  fs::remove_all(temporary, error);
  FLAME_RETURN_IF_ERROR(MakeDirectories(temporary));
  absl::Status status = write_contents(temporary);
  std::string manifest;
  if (status.ok()) {
    absl::StatusOr<std::string> built = BuildManifest(temporary, state, kind);
    status = built.status();
    if (built.ok()) manifest = *std::move(built);
  }
  if (status.ok()) status = WriteText(absl::StrCat(temporary, "/", kManifest), manifest);
  if (status.ok()) status = SyncPath(temporary);
  if (status.ok()) status = Publish(temporary, StepPath(step), root_);
  if (!status.ok()) {
    fs::remove_all(temporary, error);
    return status;
  }
  CheckpointInfo info;
  info.step = step;
  info.path = AbsolutePath(StepPath(step));
  info.checksum = StringCrc32(manifest);
  info.time_ms = NowMs();
  for (const auto& entry : fs::directory_iterator(StepPath(step))) {
    info.bytes += static_cast<int64_t>(entry.file_size());
  }
  return info;
}

absl::StatusOr<CheckpointInfo> CheckpointStore::Save(const CheckpointState& state,
                                                     torch::nn::Module& model,
                                                     torch::optim::Optimizer& optimizer) {
  return SaveAs(state, CheckpointKind::kFull, [&](const std::string& dir) {
    return WriteFullContents(dir, state, model, optimizer);
  });
}

absl::StatusOr<CheckpointInfo> CheckpointStore::SaveWeightsOnly(const CheckpointState& state,
                                                                torch::nn::Module& model,
                                                                torch::ScalarType dtype) {
  CheckpointState weights = state;
  weights.data_positions.clear();  // a weights-only checkpoint cannot resume the data
  return SaveAs(weights, CheckpointKind::kWeightsOnly, [&](const std::string& dir) {
    return WriteWeightsOnlyContents(dir, weights, model, dtype);
  });
}

absl::Status CheckpointStore::Verify(int64_t step) const {
  return VerifyDirectory(StepPath(step), step);
}

bool CheckpointStore::IsCheckpointDirectory(const std::string& dir) {
  return PathExists(absl::StrCat(dir, "/", kManifest));
}

absl::Status CheckpointStore::VerifyDirectory(const std::string& dir, int64_t step) {
  FLAME_ASSIGN_OR_RETURN(const Json manifest, ReadManifest(dir));
  if (step >= 0 && manifest.value("step", int64_t{-1}) != step) {
    return absl::DataLossError(absl::StrCat(dir, ": manifest is for another step"));
  }
  for (const std::string& name : FilesOf(KindOf(manifest))) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (!manifest["files"].contains(name)) {
      return absl::DataLossError(absl::StrCat(dir, ": manifest does not list ", name));
    }
    const Json& entry = manifest["files"][name];
    const absl::StatusOr<int64_t> bytes = FileSize(path);
    if (!bytes.ok() || *bytes != entry.value("bytes", int64_t{-1})) {
      return absl::DataLossError(absl::StrCat(path, ": missing or of the wrong size"));
    }
    FLAME_ASSIGN_OR_RETURN(const std::string crc, FileCrc32(path));
    if (crc != entry.value("crc32", "")) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointStore::Load(int64_t step, CheckpointState* state, torch::nn::Module& model,
                                   torch::optim::Optimizer& optimizer) {
  FLAME_RETURN_IF_ERROR(Verify(step));
  return LoadDirectory(StepPath(step), CheckpointComponents{}, state, model, &optimizer);
}

namespace {

absl::Status LoadModelArchive(const std::string& dir, torch::nn::Module& model) {
  // model.load() would silently adopt whatever shapes and dtypes the archive has; a checkpoint
  // of another model must fail instead, and must leave the model as it was.
  auto parameters = model.named_parameters();
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : parameters) before[item.key()] = item.value().detach().clone();
  absl::Status status = TorchIo(absl::StrCat("load ", dir, "/model.pt"), [&] {
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/model.pt");
    model.load(archive);
  });
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& was = before[item.key()];
    if (status.ok() &&
        (was.sizes() != item.value().sizes() || was.dtype() != item.value().dtype())) {
      status = absl::FailedPreconditionError(absl::StrCat(
          dir, ": parameter ", item.key(), " has shape ", c10::str(item.value().sizes()),
          ", the model needs ", c10::str(was.sizes()), " (was the model config changed?)"));
    }
  }
  if (!status.ok()) {
    torch::NoGradGuard no_grad;
    for (auto& item : model.named_parameters()) item.value().set_data(before[item.key()]);
  }
  return status;
}

absl::Status LoadRng(const std::string& dir) {
  return TorchIo(absl::StrCat("load ", dir, "/", kRngFile), [&] {
    torch::Tensor rng;
    torch::load(rng, absl::StrCat(dir, "/", kRngFile));
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  });
}

absl::Status ReadDataPositions(const std::string& dir, CheckpointState* state) {
  FLAME_ASSIGN_OR_RETURN(const std::string positions,
                         ReadFileToString(dir + "/data_positions.json"));
  const Json json = Json::parse(positions, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array()) return absl::DataLossError(dir + "/data_positions.json: not a list");
  state->data_positions.clear();
  for (const Json& item : json) {
    if (!item.is_string()) return absl::DataLossError(dir + "/data_positions.json: not strings");
    state->data_positions.push_back(item.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckpointStore::LoadDirectory(const std::string& dir,
                                            const CheckpointComponents& parts,
                                            CheckpointState* state, torch::nn::Module& model,
                                            torch::optim::Optimizer* optimizer) {
  FLAME_ASSIGN_OR_RETURN(const Json manifest, ReadManifest(dir));
  state->kind = KindOf(manifest);
  const bool full = state->kind == CheckpointKind::kFull;
  if (parts.model) {
    FLAME_RETURN_IF_ERROR(full ? LoadModelArchive(dir, model)
                               : LoadModelWeights(absl::StrCat(dir, "/", kWeightsFile), model));
  }
  if (full && parts.optimizer) {
    FLAME_CHECK(optimizer != nullptr);
    FLAME_RETURN_IF_ERROR(TorchIo(absl::StrCat("load ", dir, "/optimizer.pt"), [&] {
      torch::serialize::InputArchive archive;
      archive.load_from(dir + "/optimizer.pt");
      optimizer->load(archive);
    }));
  }
  if (full && parts.train_state) FLAME_RETURN_IF_ERROR(LoadRng(dir));
  FLAME_ASSIGN_OR_RETURN(const std::string train_state,
                         ReadFileToString(dir + "/train_state.json"));
  FLAME_RETURN_IF_ERROR(ParseTrainState(train_state, state));
  state->data_positions.clear();
  if (full) FLAME_RETURN_IF_ERROR(ReadDataPositions(dir, state));
  return absl::OkStatus();
}

std::vector<int64_t> CheckpointStore::ListSteps() const {
  std::vector<int64_t> steps;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (entry.is_directory() && name.rfind("step-", 0) == 0 &&
        absl::SimpleAtoi(name.substr(5), &step) && step >= 0) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointStore::FindNewestValid() const {
  const std::vector<int64_t> steps = ListSteps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const absl::Status status = Verify(*it);
    if (status.ok()) return *it;
    FLAME_LOG(WARNING) << "skipping checkpoint step-" << *it << ": " << status.message();
  }
  return std::nullopt;
}

absl::Status CheckpointStore::Prune(int64_t keep_latest_k) {
  if (keep_latest_k <= 0) return absl::OkStatus();
  const std::vector<int64_t> steps = ListSteps();
  for (size_t i = 0; i + static_cast<size_t>(keep_latest_k) < steps.size(); ++i) {
    std::error_code error;
    fs::remove_all(StepPath(steps[i]), error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("remove ", StepPath(steps[i]), ": ", error.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointStore::RemoveTemporaries() {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".step-", 0) == 0 && name.find(".tmp-") != std::string::npos) {
      FLAME_LOG(INFO) << "removing an interrupted checkpoint save: " << entry.path().string();
      fs::remove_all(entry.path(), error);
    }
  }
  return absl::OkStatus();
}

}  // namespace flame::worker
