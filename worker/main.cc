// flame-worker: one training rank. flamed starts it with the environment described in
// worker/rpc/worker_identity.h; it joins, trains, reports, and exits.
//
// Exit codes: 0 completed, stopped or paused; 1 training failed (reported to flamed as an error);
// 2 bad environment or join refused; 3 this attempt is stale (flamed fenced it).
//
// With arguments it runs a tool instead: `flame-worker export ...` (worker/export_command.h).
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/logging.h"
#include "worker/dist/communicator.h"
#include "worker/export_command.h"
#include "worker/rpc/coordinator_client.h"
#include "worker/rpc/worker_identity.h"
#include "worker/trainer.h"

namespace flame::worker {
namespace {

constexpr int kExitError = 1, kExitUsage = 2, kExitStale = 3;

std::string Hostname() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? name : "unknown";
}

// CPU ranks of one host share its cores: OMP_NUM_THREADS when set, else cores / local ranks.
void ConfigureThreads(const WorkerIdentity& id) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;  // LibTorch honours it already
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks_here = std::max(1, local != nullptr ? std::atoi(local) : id.world_size);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / ranks_here));
}

std::unique_ptr<Communicator> MakeCommunicator(const WorkerIdentity& id) {
  if (id.world_size == 1) return std::make_unique<LocalCommunicator>();
  StoreOptions options;
  options.host = id.master_addr;
  options.port = static_cast<uint16_t>(id.master_port);
  return CreateStoreCommunicator(id.rank, id.world_size, options);
}

FinishReason ReasonOf(TrainOutcome outcome) {
  switch (outcome) {
    case TrainOutcome::kStopped:
      return FinishReason::kStopped;
    case TrainOutcome::kPaused:
      return FinishReason::kPaused;
    default:
      return FinishReason::kCompleted;
  }
}

int Main() {
  const absl::StatusOr<WorkerIdentity> identity = WorkerIdentityFromEnvironment();
  if (!identity.ok()) {
    FLAME_LOG(ERROR) << identity.status().message();
    return kExitUsage;
  }
  ConfigureThreads(*identity);
  std::unique_ptr<CoordinatorClient> client = CoordinatorClient::Create(*identity);
  const absl::StatusOr<JoinResult> joined = client->Join(::getpid(), Hostname());
  if (!joined.ok()) {
    FLAME_LOG(ERROR) << joined.status().message();
    return client->stale() ? kExitStale : kExitUsage;
  }
  client->StartHeartbeats();
  FLAME_LOG(INFO) << "job " << identity->job_id << " attempt " << identity->attempt << ": rank "
                  << identity->rank << " of " << identity->world_size << ", dump folder "
                  << joined->dump_folder;

  absl::StatusOr<TrainResult> result = absl::UnknownError("not started");
  NullProgressSink quiet;  // only rank 0 reports progress
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<Trainer> trainer;
  try {
    communicator = MakeCommunicator(*identity);
    ProgressSink* progress =
        identity->rank == 0 ? static_cast<ProgressSink*>(client.get()) : &quiet;
    trainer = std::make_unique<Trainer>(joined->config,
                                        TrainerContext{communicator.get(), progress, client.get()});
    result = trainer->Run();
  } catch (const std::exception& e) {  // the store could not be created or reached
    result = absl::UnavailableError(std::string("rendezvous: ") + e.what());
  }
  const int64_t step = trainer != nullptr ? trainer->step() : 0;
  if (!result.ok()) {
    FLAME_LOG(ERROR) << "training failed: " << result.status().message();
    client->Finish(FinishReason::kError, std::string(result.status().message()), step)
        .IgnoreError();
    return kExitError;
  }
  if (result->outcome == TrainOutcome::kAbandoned) return kExitStale;
  const absl::Status finished = client->Finish(ReasonOf(result->outcome), "", result->step);
  if (!finished.ok()) {
    FLAME_LOG(WARNING) << "finish: " << finished.message();
  }
  return 0;
}

}  // namespace
}  // namespace flame::worker

int main(int argc, char** argv) {
  if (argc > 1) {
    const std::string command = argv[1];
    if (command == "export") return flame::worker::RunExportCommand(argc - 1, argv + 1);
    std::fprintf(stderr, "flame-worker: unknown command \"%s\" (known: export)\n", argv[1]);
    return 2;
  }
  return flame::worker::Main();
}
