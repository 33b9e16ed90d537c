// Durable storage of job records. The JobManager writes a job's whole record on every change,
// before it answers the RPC that caused the change, and reads everything back once at start.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flame/v1/job.pb.h"

namespace flame::server {

struct StoredJobs {
  std::vector<flame::v1::Job> jobs;  // in Job.sequence order
  int64_t last_sequence = 0;         // the highest sequence ever handed out (0: none yet)
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Every stored job, and the sequence counter.
  virtual absl::StatusOr<StoredJobs> LoadAll() = 0;

  // Writes `job` (replacing its previous record) and raises the sequence counter to
  // job.sequence() if it is higher, in one atomic write that is durable when this returns.
  virtual absl::Status Put(const flame::v1::Job& job) = 0;
};

}  // namespace flame::server
