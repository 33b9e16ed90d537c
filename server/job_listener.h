// An observer of job changes (metrics, and anything else that mirrors job state).
#pragma once

#include "flame/v1/job.pb.h"

namespace flame::server {

// Told about every published change of a job, under the JobManager's lock: it must be quick
// and must not call back into the manager. `before` is null for a job seen for the first time
// (a submit, or a job loaded at start).
class JobListener {
 public:
  virtual ~JobListener() = default;
  virtual void OnJobChanged(const flame::v1::Job* before, const flame::v1::Job& after) = 0;
};

}  // namespace flame::server
