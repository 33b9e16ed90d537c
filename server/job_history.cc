#include "server/job_history.h"

#include "common/status_macros.h"

namespace flame::server {

using flame::v1::MetricPoint;

namespace {

// Removes every second point (1, 3, 5, ...) from the first half of `history`.
void ThinOlderHalf(google::protobuf::RepeatedPtrField<MetricPoint>* history) {
  const int half = history->size() / 2;
  int write = 1;  // point 0 always stays
  for (int read = 1; read < history->size(); ++read) {
    const bool drop = read < half && read % 2 == 1;
    if (drop) continue;
    if (write != read) history->SwapElements(write, read);
    ++write;
  }
  history->DeleteSubrange(write, history->size() - write);
}

}  // namespace

void AppendHistoryPoint(google::protobuf::RepeatedPtrField<MetricPoint>* history,
                        const MetricPoint& point, size_t capacity) {
  FLAME_CHECK(capacity >= 4);
  // A restarted attempt resumes from its checkpoint and logs those steps again: its points win.
  int keep = history->size();
  while (keep > 0 && history->Get(keep - 1).step() >= point.step()) --keep;
  history->DeleteSubrange(keep, history->size() - keep);

  if (static_cast<size_t>(history->size()) >= capacity) ThinOlderHalf(history);
  *history->Add() = point;
}

MetricPoint HistoryPointFromProgress(const flame::v1::Progress& progress) {
  MetricPoint point;
  point.set_step(progress.step());
  point.set_loss(progress.loss());
  point.set_lr(progress.lr());
  point.set_grad_norm(progress.grad_norm());
  point.set_tokens_per_second(progress.tokens_per_second());
  point.set_time_ms(progress.update_time_ms());
  point.set_max_loss(progress.max_loss());
  point.set_tokens(progress.tokens());
  point.set_mfu(progress.mfu());
  // A report repeats the latest evaluation; the point of the step it ran at keeps it.
  if (progress.eval_step() > 0 && progress.eval_step() == progress.step()) {
    point.set_eval_loss(progress.eval_loss());
  }
  return point;
}

}  // namespace flame::server
