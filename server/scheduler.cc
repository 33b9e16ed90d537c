#include "server/scheduler.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace flame::server {

std::string SlotKindName(SlotKind kind) { return kind == SlotKind::kGpu ? "GPU" : "CPU slot"; }

Scheduler::Scheduler(SlotPool pool) : pool_(pool), busy_(pool.count > 0 ? pool.count : 0) {}

int Scheduler::free_slots() const {
  int free = 0;
  for (bool busy : busy_) free += busy ? 0 : 1;
  return free;
}

absl::Status Scheduler::CheckFits(int ranks) const {
  if (ranks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.ranks must be positive (got ", ranks, ")"));
  }
  if (ranks > pool_.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.ranks = ", ranks, " needs ", ranks, " ", SlotKindName(pool_.kind),
                     "s, but this host has ", pool_.count, " (flamed --",
                     pool_.kind == SlotKind::kGpu ? "gpus" : "cpu_slots", ")"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Enqueue(const std::string& job_id, int64_t sequence, int ranks) {
  if (IsQueued(job_id) || IsPlaced(job_id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is already queued or holds slots"));
  }
  if (queue_.count(sequence) > 0) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", sequence, " of job ", job_id,
                                                      " is taken by ", queue_.at(sequence).job_id));
  }
  queue_.emplace(sequence, Waiting{job_id, ranks});
  return absl::OkStatus();
}

bool Scheduler::Dequeue(const std::string& job_id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->second.job_id == job_id) {
      queue_.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<Placement> Scheduler::PlaceReady() {
  std::vector<Placement> placed;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const Waiting& waiting = it->second;
    // A job larger than the whole pool (the host shrank since it was queued) can never run;
    // it must not block the queue behind it.
    if (waiting.ranks > pool_.count) {
      ++it;
      continue;
    }
    if (waiting.ranks > free_slots()) break;  // head-of-line: nobody overtakes the oldest job
    Placement placement{waiting.job_id, {}};
    for (int slot = 0; slot < static_cast<int>(busy_.size()) &&
                       static_cast<int>(placement.slots.size()) < waiting.ranks;
         ++slot) {
      if (busy_[slot]) continue;
      busy_[slot] = true;
      placement.slots.push_back(slot);
    }
    placed_[placement.job_id] = placement.slots;
    placed.push_back(std::move(placement));
    it = queue_.erase(it);
  }
  return placed;
}

void Scheduler::Adopt(const std::string& job_id, const std::vector<int>& slots) {
  Release(job_id);
  for (int slot : slots) {
    if (slot >= 0 && slot < static_cast<int>(busy_.size())) busy_[slot] = true;
  }
  placed_[job_id] = slots;
}

void Scheduler::Release(const std::string& job_id) {
  auto it = placed_.find(job_id);
  if (it == placed_.end()) return;
  for (int slot : it->second) {
    if (slot >= 0 && slot < static_cast<int>(busy_.size())) busy_[slot] = false;
  }
  placed_.erase(it);
}

bool Scheduler::IsQueued(const std::string& job_id) const {
  for (const auto& [sequence, waiting] : queue_) {
    if (waiting.job_id == job_id) return true;
  }
  return false;
}

std::vector<int> Scheduler::SlotsOf(const std::string& job_id) const {
  auto it = placed_.find(job_id);
  return it == placed_.end() ? std::vector<int>{} : it->second;
}

}  // namespace flame::server
