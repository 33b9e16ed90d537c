#include "server/supervisor.h"

namespace flame::server {

Supervisor::Supervisor(JobManager* manager, absl::Duration period)
    : manager_(manager), period_(period) {}

Supervisor::~Supervisor() { Stop(); }

void Supervisor::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void Supervisor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Supervisor::Run() {
  while (true) {
    manager_->Supervise();
    absl::MutexLock lock(&mu_);
    // Sleeps for one period, or until Stop() flips the flag.
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), period_);
    if (stopping_) return;
  }
}

}  // namespace flame::server
