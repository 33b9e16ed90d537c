// How flamed starts, watches and stops worker processes. The JobManager decides *what* runs;
// a Launcher does it. LocalLauncher forks processes on this host; tests use a fake.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flame::server {

// Everything needed to start the ranks of one attempt.
struct LaunchRequest {
  std::string job_id;
  int attempt = 0;                  // 1-based; FLAME_ATTEMPT
  std::string coordinator_address;  // FLAME_COORDINATOR: flamed's gRPC HOST:PORT
  std::string auth_token;           // FLAME_TOKEN when not empty
  bool gpu_slots = false;           // the slots are GPU ordinals (CUDA_VISIBLE_DEVICES)
  bool hide_gpus = false;           // the job asked for device "cpu": CUDA_VISIBLE_DEVICES=""
  std::vector<int> slots;           // one per rank, in rank order
  std::string log_dir;              // rank r appends to <log_dir>/rank-<r>.log
};

struct LaunchedRank {
  int rank = 0;
  int64_t pid = 0;
  std::string log_path;
};

struct LaunchResult {
  std::vector<LaunchedRank> ranks;  // in rank order
  std::string master_addr;          // MASTER_ADDR: where rank 0 hosts the c10d store
  int master_port = 0;              // MASTER_PORT
};

// What Poll found out about a rank's process.
struct ProcessState {
  enum class Kind {
    kRunning,  // alive, and still the worker we started
    kExited,   // ended; exit_code holds its status (128 + n for signal n), or -1 when unknown
  };
  Kind kind = Kind::kRunning;
  int exit_code = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Starts every rank, or none: when one cannot be started, those already started are killed
  // and the error names the rank and the reason. The launcher picks the rendezvous address.
  virtual absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) = 0;

  // Looks at a rank's process without blocking. Works for processes this flamed started and
  // for workers left by a previous flamed (which it can no longer wait for: their exit code
  // is then unknown). A pid now used by some other program counts as exited.
  virtual ProcessState Poll(int64_t pid, const std::string& job_id, int attempt) = 0;

  // Sends `signal` to the rank's whole process group (each worker leads its own session), if
  // `pid` is still the worker of (job_id, attempt): a pid left by an earlier flamed may since
  // belong to another program, which must not be hit.
  virtual void Signal(int64_t pid, const std::string& job_id, int attempt, int signal) = 0;
};

}  // namespace flame::server
