// How a rank shows its ProgressUpdate: the console line of the job log and the TensorBoard
// scalars, both under flame's names so that a flame user reads them unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "worker/metrics/tensorboard_writer.h"
#include "worker/progress.h"

namespace flame::worker {

// 1234567 -> "1,234,567" (flame's {:,} formatting).
std::string Grouped(int64_t value);

// Seconds as HH:MM:SS (hours may exceed 24).
std::string Clock24(double seconds);

// flame's two log lines in one:
//   step: 10 token: 20,480 loss: 7.6113 (max 7.6201) lr: 3.0000e-03 gnorm: 1.23
//   memory: 0.41GiB (peak 0.42GiB) tps: 9,876 tflops: 0.0494 mfu: 0.00% data: 1.2% (0.003s)
//   skipped: 0 [00:00:12<00:04:50]
// (one line; wrapped here). `eta_seconds` < 0 prints "--:--:--".
std::string FormatProgressLine(const ProgressUpdate& progress, double eta_seconds);

// "eval: step 100 loss 5.1234 (8 batches)".
std::string FormatEvalLine(const ProgressUpdate& progress, int64_t batches);

// Every metric of flame's MetricsProcessor that we compute, under its name
// (loss_metrics/global_avg_loss, optimizer/lr, ...), plus loss_metrics/eval_loss when the
// update is the one an evaluation produced (eval_step == step), and tokens_seen.
Scalars FlameScalars(const ProgressUpdate& progress);

}  // namespace flame::worker
