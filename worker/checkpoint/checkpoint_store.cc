#include "worker/checkpoint/checkpoint_store.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kFormat[] = "flame-checkpoint-1";
constexpr char kManifest[] = "manifest.json";
// Every file a checkpoint must have, besides the manifest.
const char* const kFiles[] = {"model.pt", "optimizer.pt", "rng.pt", "train_state.json",
                              "data_positions.json"};

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
absl::StatusOr<std::string> BuildManifest(const std::string& dir, const CheckpointState& state) {
  Json files = Json::object();
  for (const char* name : kFiles) {
    const std::string path = absl::StrCat(dir, "/", name);
    FLAME_ASSIGN_OR_RETURN(const int64_t bytes, FileSize(path));
    FLAME_ASSIGN_OR_RETURN(const std::string crc, FileCrc32(path));
    files[name] = Json{{"bytes", bytes}, {"crc32", crc}};
  }
  const Json manifest = {{"format", kFormat},
                         {"step", state.train_state.step},
                         {"tokens", state.train_state.tokens},
                         {"config_hash", state.spec_hash},
                         {"world_size", state.world_size},
                         {"files", files}};
  return manifest.dump(2) + "\n";
}

// Writes everything but the manifest into `dir`, each file fsynced.
absl::Status WriteContents(const std::string& dir, const CheckpointState& state,
                           torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  const std::string model_path = dir + "/model.pt", optimizer_path = dir + "/optimizer.pt";
  const std::string rng_path = dir + "/rng.pt";
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

absl::StatusOr<CheckpointInfo> CheckpointStore::Save(const CheckpointState& state,
                                                     torch::nn::Module& model,
                                                     torch::optim::Optimizer& optimizer) {
  const int64_t step = state.train_state.step;
  const std::string temporary = absl::StrCat(root_, "/.step-", step, ".tmp-", ::getpid());
  std::error_code error;
  fs::remove_all(temporary, error);
  FLAME_RETURN_IF_ERROR(MakeDirectories(temporary));
  absl::Status status = WriteContents(temporary, state, model, optimizer);
  std::string manifest;
  if (status.ok()) {
    absl::StatusOr<std::string> built = BuildManifest(temporary, state);
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

absl::Status CheckpointStore::Verify(int64_t step) const {
  const std::string dir = StepPath(step);
  FLAME_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(dir + "/" + kManifest));
  const Json manifest = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || manifest.value("format", "") != kFormat ||
      !manifest.contains("files") || !manifest["files"].is_object()) {
    return absl::DataLossError(absl::StrCat(dir, ": manifest is not a ", kFormat, " manifest"));
  }
  if (manifest.value("step", int64_t{-1}) != step) {
    return absl::DataLossError(absl::StrCat(dir, ": manifest is for another step"));
  }
  for (const char* name : kFiles) {
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
  const std::string dir = StepPath(step);
  // model.load() would silently adopt whatever shapes the archive has; a checkpoint of another
  // model must fail instead.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model.named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  FLAME_RETURN_IF_ERROR(TorchIo(absl::StrCat("load ", dir, "/model.pt"), [&] {
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/model.pt");
    model.load(archive);
  }));
  for (const auto& item : model.named_parameters()) {
    if (shapes[item.key()] != item.value().sizes().vec()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": parameter ", item.key(),
                       " has another shape than the model (was the model "
                       "config changed?)"));
    }
  }
  FLAME_RETURN_IF_ERROR(TorchIo(absl::StrCat("load ", dir, "/optimizer.pt"), [&] {
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/optimizer.pt");
    optimizer.load(archive);
  }));
  FLAME_RETURN_IF_ERROR(TorchIo(absl::StrCat("load ", dir, "/rng.pt"), [&] {
    torch::Tensor rng;
    torch::load(rng, dir + "/rng.pt");
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }));
  FLAME_ASSIGN_OR_RETURN(const std::string train_state,
                         ReadFileToString(dir + "/train_state.json"));
  FLAME_RETURN_IF_ERROR(ParseTrainState(train_state, state));
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
