// Who this worker is, from the environment the launcher (flamed, or srun) sets:
//
//   FLAME_COORDINATOR  host:port of flamed's gRPC server          (required)
//   FLAME_JOB_ID       the job                                    (required)
//   FLAME_ATTEMPT      attempt number; fences stale workers       (required, >= 1)
//   RANK               this rank, 0 .. WORLD_SIZE - 1             (required)
//   LOCAL_RANK         rank on this host                          (default RANK)
//   WORLD_SIZE         number of ranks                            (required, >= 1)
//   MASTER_ADDR        host of rank 0's c10d store                (default 127.0.0.1)
//   MASTER_PORT        port of rank 0's c10d store                (required when WORLD_SIZE > 1)
//   FLAME_TOKEN        bearer token for flamed, when it needs one (optional)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace flame::worker {

struct WorkerIdentity {
  std::string coordinator;
  std::string job_id;
  int32_t attempt = 0;
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t world_size = 1;
  std::string master_addr = "127.0.0.1";
  int32_t master_port = 0;
  std::string token;
};

// `getenv` returns null for unset variables (std::getenv in production, a map in tests).
absl::StatusOr<WorkerIdentity> ParseWorkerIdentity(
    const std::function<const char*(const char*)>& getenv);

absl::StatusOr<WorkerIdentity> WorkerIdentityFromEnvironment();

}  // namespace flame::worker
