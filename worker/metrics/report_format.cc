#include "worker/metrics/report_format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flame::worker {

std::string Grouped(int64_t value) {
  const std::string digits = std::to_string(value < 0 ? -value : value);
  std::string grouped = value < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return grouped;
}

std::string Clock24(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const auto total = static_cast<int64_t>(seconds);
  return absl::StrFormat("%02d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
}

std::string FormatProgressLine(const ProgressUpdate& p, double eta_seconds) {
  return absl::StrFormat(
      "step: %8s token: %15s  loss: %7.4f (max %7.4f)  lr: %.4e gnorm: %5.2f memory: %5.2fGiB "
      "(peak %5.2fGiB) tps: %7s tflops: %.3g mfu: %6.2f%% data: %4.1f%% (%.3fs) skipped: %d "
      "[%s<%s]",
      Grouped(p.step), Grouped(p.tokens), p.loss, p.max_loss, p.lr, p.grad_norm, p.memory_gib,
      p.memory_peak_gib, Grouped(std::llround(p.tokens_per_second)), p.tflops, p.mfu,
      p.data_loading_share, p.data_loading_seconds, p.skipped_steps, Clock24(p.elapsed_seconds),
      Clock24(eta_seconds));
}

std::string FormatEvalLine(const ProgressUpdate& p, int64_t batches) {
  return absl::StrFormat("eval: step %s loss %.4f (%d %s)", Grouped(p.eval_step), p.eval_loss,
                         batches, batches == 1 ? "batch" : "batches");
}

Scalars FlameScalars(const ProgressUpdate& p) {
  Scalars scalars = {
      {"loss_metrics/global_avg_loss", p.loss},
      {"loss_metrics/global_max_loss", p.max_loss},
      {"throughput(tps)", p.tokens_per_second},
      {"tflops", p.tflops},
      {"mfu(%)", p.mfu},
      {"time_metrics/end_to_end(s)", p.step_seconds},
      {"time_metrics/data_loading(s)", p.data_loading_seconds},
      {"time_metrics/data_loading(%)", p.data_loading_share},
      {"memory/max_reserved(GiB)", p.memory_gib},
      {"memory/max_active(GiB)", p.memory_active_gib},
      {"memory/peak(GiB)", p.memory_peak_gib},
      {"optimizer/lr", p.lr},
      {"optimizer/grad_norm", p.grad_norm},
      {"optimizer/skipped_step", static_cast<double>(p.skipped_steps)},
      {"tokens_seen", static_cast<double>(p.tokens)},
      {"time_metrics/elapsed(s)", p.elapsed_seconds},
  };
  if (p.eval_step > 0 && p.eval_step == p.step) {
    scalars.emplace_back("loss_metrics/eval_loss", p.eval_loss);
  }
  return scalars;
}

}  // namespace flame::worker
