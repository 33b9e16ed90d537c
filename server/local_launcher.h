// Launcher for this host: one `flame-worker` process per rank.
//
// Each worker leads its own session (setsid), so it has its own process group, is not hit by
// signals meant for flamed's terminal or service unit, and keeps training when flamed stops
// or restarts; a new flamed finds it again by pid (Poll). Its stdin is /dev/null and its
// stdout+stderr are appended to <log_dir>/rank-<r>.log, after a banner line per attempt.
//
// Environment of rank r (on top of flamed's own, minus any inherited values of these):
//   FLAME_COORDINATOR, FLAME_JOB_ID, FLAME_ATTEMPT, RANK=r, LOCAL_RANK=r, WORLD_SIZE,
//   LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port picked here),
//   NCCL_NVLS_ENABLE=0, FLAME_TOKEN when flamed requires a bearer token, and on GPU slots
//   CUDA_VISIBLE_DEVICES=<the job's GPUs, in rank order>, so that rank r uses device LOCAL_RANK
//   as under torchrun.
#pragma once

#include <string>

#include "server/launcher.h"

namespace flame::server {

class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(std::string worker_binary);

  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override;
  ProcessState Poll(int64_t pid, const std::string& job_id, int attempt) override;
  void Signal(int64_t pid, const std::string& job_id, int attempt, int signal) override;

  const std::string& worker_binary() const { return worker_binary_; }

 private:
  // True when `pid` is alive and is the worker of (job_id, attempt), judged by its command
  // line (names the worker binary) and, where readable, its environment.
  bool IsOurWorker(int64_t pid, const std::string& job_id, int attempt) const;
  // True when `pid` is a child of this process that has not been reaped (a zombie included):
  // its pid cannot have been reused.
  static bool IsUnreapedChild(int64_t pid);

  const std::string worker_binary_;
};

// The default worker binary: `flame-worker` next to the running executable.
std::string DefaultWorkerBinary();

// A TCP port on `host` that nothing listens on right now (the kernel's pick for port 0). Another
// process may take it before the worker binds it; rank 0 then fails to start its store and the
// attempt is retried like any failure.
absl::StatusOr<int> PickFreeTcpPort(const std::string& host);

}  // namespace flame::server
