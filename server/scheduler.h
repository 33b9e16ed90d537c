// FIFO placement of jobs onto the host's slots: GPUs when the host has them, else CPU slots.
//
// A job takes `ranks` slots all at once (gang scheduling: a mesh with a missing rank cannot
// train) and keeps them until every process of its attempt is gone, restarts included. The
// queue is ordered by Job.sequence and is head-of-line: while the oldest job does not fit,
// younger ones wait behind it even if they would fit, so a large job is never starved by a
// stream of small ones.
//
// Pure logic, not thread-safe: the JobManager owns one and calls it under its own mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace flame::server {

enum class SlotKind { kCpu, kGpu };

struct SlotPool {
  SlotKind kind = SlotKind::kCpu;
  int count = 0;
};

// What a job holds once placed: slot indices, one per rank in rank order. For a GPU pool these
// are the CUDA device ordinals the ranks get.
struct Placement {
  std::string job_id;
  std::vector<int> slots;
};

class Scheduler {
 public:
  explicit Scheduler(SlotPool pool);

  const SlotPool& pool() const { return pool_; }
  int free_slots() const;

  // OK when a job of `ranks` ranks can ever run here; the submit-time check. The error says
  // how many slots of which kind the host has.
  absl::Status CheckFits(int ranks) const;

  // Queues a job; `sequence` orders the queue (submission order, kept across resumes).
  // A job that is already queued or placed is refused with FAILED_PRECONDITION.
  absl::Status Enqueue(const std::string& job_id, int64_t sequence, int ranks);

  // Takes a queued job out of the queue (cancel); false when it was not queued.
  bool Dequeue(const std::string& job_id);

  // Places jobs from the head of the queue for as long as the head fits, and returns them.
  // A job bigger than the whole pool (possible only for jobs queued before the host's slots
  // were reduced) is passed over instead of blocking the queue forever.
  std::vector<Placement> PlaceReady();

  // Records slots that a job already holds (a job whose workers survived a flamed restart).
  // Slots outside the pool (the host shrank) are kept on the job but free nothing and block
  // nothing.
  void Adopt(const std::string& job_id, const std::vector<int>& slots);

  // Frees the job's slots; a no-op for a job that holds none.
  void Release(const std::string& job_id);

  bool IsQueued(const std::string& job_id) const;
  bool IsPlaced(const std::string& job_id) const { return placed_.count(job_id) > 0; }
  // Slots a placed job holds; empty when it holds none.
  std::vector<int> SlotsOf(const std::string& job_id) const;

 private:
  struct Waiting {
    std::string job_id;
    int ranks = 0;
  };

  SlotPool pool_;
  std::vector<bool> busy_;                          // one entry per slot in the pool
  std::map<int64_t, Waiting> queue_;                // by sequence: FIFO
  std::map<std::string, std::vector<int>> placed_;  // job id -> its slots
};

std::string SlotKindName(SlotKind kind);  // "GPU" | "CPU slot"

}  // namespace flame::server
