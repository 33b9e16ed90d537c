// The thread that keeps jobs moving without anyone calling: it runs JobManager::Supervise()
// every `period` (reaping exited ranks, enforcing deadlines, starting queued jobs).
#pragma once

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/job_manager.h"

namespace flame::server {

class Supervisor {
 public:
  Supervisor(JobManager* manager, absl::Duration period);
  ~Supervisor();  // stops the thread
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void Start();
  // Returns once the thread has finished its current pass and exited. Idempotent.
  void Stop();

 private:
  void Run();

  JobManager* const manager_;
  const absl::Duration period_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flame::server
