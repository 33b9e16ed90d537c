// What a training rank tells its coordinator, and what the coordinator tells it back, as plain
// C++ (the Torch side never sees the protos; the RPC client translates).
//
// The trainer reports through a ProgressSink and polls a DirectiveSource once per step. The
// coordinator client implements both; tests use in-memory ones, so the trainer runs without a
// coordinator.
#pragma once

#include <cstdint>
#include <string>

namespace flame::worker {

// Mirrors flame.v1.Progress (flame's metric names in comments).
struct ProgressUpdate {
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t tokens = 0;            // tokens seen so far, all ranks
  double loss = 0;               // loss_metrics/global_avg_loss
  double max_loss = 0;           // loss_metrics/global_max_loss
  double lr = 0;                 // optimizer/lr
  double grad_norm = 0;          // optimizer/grad_norm
  double tokens_per_second = 0;  // throughput(tps), per device
  double mfu = 0;                // mfu(%); 0 where the peak FLOPS are unknown (CPU)
  double tflops = 0;             // tflops: model FLOPs per second per device / 1e12
  // Memory of this rank. CUDA: peaks since the last log (flame's max_reserved, max_active) and
  // the largest reserved of the attempt. CPU: the resident set now, 0 (the CPU allocator has no
  // such count), and the process's peak resident set.
  double memory_gib = 0;            // memory/max_reserved(GiB)
  double memory_active_gib = 0;     // memory/max_active(GiB)
  double memory_peak_gib = 0;       // memory/peak(GiB)
  double step_seconds = 0;          // time_metrics/end_to_end(s): mean step time
  double data_loading_seconds = 0;  // time_metrics/data_loading(s): mean data wait per step
  double data_loading_share = 0;    // time_metrics/data_loading(%), 0..100
  int64_t skipped_steps = 0;        // optimizer/skipped_step
  double elapsed_seconds = 0;       // training time of this job, all attempts
  int64_t resumed_from_step = 0;    // the step this attempt restored from (0: fresh start)
  // The latest held-out evaluation (metrics.eval_interval), carried by every later report.
  double eval_loss = 0;   // loss_metrics/eval_loss
  int64_t eval_step = 0;  // the step it was measured after; 0: none yet
};

// A checkpoint that is durable on disk (mirrors flame.v1.CheckpointRecord).
struct CheckpointInfo {
  int64_t step = 0;
  std::string path;      // absolute step-N directory
  int64_t bytes = 0;     // all files together
  std::string checksum;  // of the manifest
  int64_t time_ms = 0;   // when it became durable (unix ms)
};

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  // Called by rank 0 at step 1 and every log step. Must not block on the network.
  virtual void ReportProgress(const ProgressUpdate& progress) = 0;
  // Called by rank 0 once the checkpoint is durable. Must not block on the network.
  virtual void CommitCheckpoint(const CheckpointInfo& checkpoint) = 0;
};

// What to do after the current step. Ordered by precedence: when ranks disagree (each has its
// own heartbeat), they all follow the largest value.
enum class Directive : int {
  kContinue = 0,
  kStop = 1,            // finish the step and exit (cancel)
  kCheckpointStop = 2,  // finish the step, save, exit (pause)
  kAbandon = 3,         // this attempt is stale (the coordinator fenced it): exit at once
};

class DirectiveSource {
 public:
  virtual ~DirectiveSource() = default;
  // The latest directive; cheap, never blocks. `step` is the step being trained, which the
  // coordinator client passes on in its heartbeats (hang detection watches it).
  virtual Directive Current(int64_t step) = 0;
};

// Does nothing: a trainer without a coordinator (and every rank but 0 for progress).
class NullProgressSink final : public ProgressSink {
 public:
  void ReportProgress(const ProgressUpdate&) override {}
  void CommitCheckpoint(const CheckpointInfo&) override {}
};

class ContinueDirectiveSource final : public DirectiveSource {
 public:
  Directive Current(int64_t) override { return Directive::kContinue; }
};

}  // namespace flame::worker
