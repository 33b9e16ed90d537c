#include "server/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"
#include "server/job_state_machine.h"

namespace flame::server {
namespace {

prometheus::Family<prometheus::Gauge>& JobGauge(prometheus::Registry& registry,
                                                const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(JobGauge(*registry_, "flame_jobs", "Jobs known to flamed, by state")),
      step_(JobGauge(*registry_, "flame_job_step", "Latest logged training step")),
      loss_(JobGauge(*registry_, "flame_job_loss",
                     "Training loss (global average) at the "
                     "latest logged step")),
      learning_rate_(JobGauge(*registry_, "flame_job_learning_rate", "Learning rate")),
      grad_norm_(JobGauge(*registry_, "flame_job_grad_norm", "Gradient norm before clipping")),
      tokens_per_second_(JobGauge(*registry_, "flame_job_tokens_per_second",
                                  "Training throughput per device, tokens per second")),
      tokens_(JobGauge(*registry_, "flame_job_tokens", "Tokens seen so far, all ranks")),
      mfu_percent_(
          JobGauge(*registry_, "flame_job_mfu_percent", "Model FLOPs utilisation, percent")),
      memory_bytes_(JobGauge(*registry_, "flame_job_memory_bytes",
                             "Peak memory of a rank (GPU reserved, or resident set on CPU)")),
      max_loss_(JobGauge(*registry_, "flame_job_max_loss",
                         "Training loss (maximum over ranks) at the latest logged step")),
      eval_loss_(JobGauge(*registry_, "flame_job_eval_loss",
                          "Held-out loss of the latest evaluation (metrics.eval_interval)")),
      eval_step_(JobGauge(*registry_, "flame_job_eval_step",
                          "Step of the latest evaluation (0: none yet)")),
      model_flops_per_second_(JobGauge(*registry_, "flame_job_model_flops_per_second",
                                       "Model FLOPs per second per device (flame's tflops)")),
      step_seconds_(JobGauge(*registry_, "flame_job_step_seconds",
                             "Mean training step time since the previous report")),
      data_loading_seconds_(JobGauge(*registry_, "flame_job_data_loading_seconds",
                                     "Mean wait for training data per step")),
      data_loading_percent_(JobGauge(*registry_, "flame_job_data_loading_percent",
                                     "Share of the step time spent waiting for data, percent")),
      skipped_steps_(JobGauge(*registry_, "flame_job_skipped_steps",
                              "Optimizer updates skipped for a NaN/Inf gradient norm")),
      elapsed_seconds_(JobGauge(*registry_, "flame_job_elapsed_seconds",
                                "Training time of the job over all attempts")),
      memory_active_bytes_(JobGauge(*registry_, "flame_job_memory_active_bytes",
                                    "Peak active GPU memory of a rank (0 on CPU)")),
      memory_peak_bytes_(JobGauge(*registry_, "flame_job_memory_peak_bytes",
                                  "Largest memory of a rank so far (GPU reserved, or peak "
                                  "resident set on CPU)")),
      restarts_(prometheus::BuildCounter()
                    .Name("flame_job_restarts_total")
                    .Help("Automatic restarts of a job after a failed attempt")
                    .Register(*registry_)) {
  // Every state is exported from the start, so that dashboards see zeros, not gaps.
  for (int value = flame::v1::JobState_MIN; value <= flame::v1::JobState_MAX; ++value) {
    const auto state = static_cast<flame::v1::JobState>(value);
    if (!flame::v1::JobState_IsValid(value) || state == flame::v1::JOB_STATE_UNSPECIFIED) continue;
    by_state_[state] = &jobs_.Add({{"state", StateLabel(state)}});
  }
}

Metrics::~Metrics() = default;

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Serve(const std::string& listen_address) {
  auto metrics = std::make_unique<Metrics>();
  // prometheus-cpp reports a failed bind by throwing; keep exceptions out of flamed.
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(listen_address, 2);
  } catch (const std::exception& error) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen_address, ": ", error.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint ", listen_address, " reports no listening port"));
  }
  metrics->port_ = ports.front();
  return metrics;
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

Metrics::JobSeries& Metrics::SeriesFor(const std::string& job_id) {
  auto it = series_.find(job_id);
  if (it != series_.end()) return it->second;
  const prometheus::Labels labels = {{"job_id", job_id}};
  JobSeries series{&step_.Add(labels),
                   &loss_.Add(labels),
                   &learning_rate_.Add(labels),
                   &grad_norm_.Add(labels),
                   &tokens_per_second_.Add(labels),
                   &tokens_.Add(labels),
                   &mfu_percent_.Add(labels),
                   &memory_bytes_.Add(labels),
                   &max_loss_.Add(labels),
                   nullptr,  // eval_loss, eval_step: from the first evaluation on
                   nullptr,
                   &model_flops_per_second_.Add(labels),
                   &step_seconds_.Add(labels),
                   &data_loading_seconds_.Add(labels),
                   &data_loading_percent_.Add(labels),
                   &skipped_steps_.Add(labels),
                   &elapsed_seconds_.Add(labels),
                   &memory_active_bytes_.Add(labels),
                   &memory_peak_bytes_.Add(labels),
                   &restarts_.Add(labels)};
  return series_.emplace(job_id, series).first->second;
}

void Metrics::OnJobChanged(const flame::v1::Job* before, const flame::v1::Job& after) {
  const flame::v1::JobState old_state =
      before != nullptr ? before->state() : flame::v1::JOB_STATE_UNSPECIFIED;
  if (old_state != after.state()) {
    if (auto it = by_state_.find(old_state); it != by_state_.end()) it->second->Decrement();
    if (auto it = by_state_.find(after.state()); it != by_state_.end()) it->second->Increment();
  }
  JobSeries& series = SeriesFor(after.id());
  const flame::v1::Progress& progress = after.progress();
  series.step->Set(static_cast<double>(progress.step()));
  series.loss->Set(progress.loss());
  series.learning_rate->Set(progress.lr());
  series.grad_norm->Set(progress.grad_norm());
  series.tokens_per_second->Set(progress.tokens_per_second());
  series.tokens->Set(static_cast<double>(progress.tokens()));
  series.mfu_percent->Set(progress.mfu());
  constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;
  series.memory_bytes->Set(progress.memory_gib() * kBytesPerGib);
  series.max_loss->Set(progress.max_loss());
  if (progress.eval_step() > 0) {
    // A job without evaluations has no eval series at all, rather than a loss of 0.
    if (series.eval_loss == nullptr) {
      const prometheus::Labels labels = {{"job_id", after.id()}};
      series.eval_loss = &eval_loss_.Add(labels);
      series.eval_step = &eval_step_.Add(labels);
    }
    series.eval_loss->Set(progress.eval_loss());
    series.eval_step->Set(static_cast<double>(progress.eval_step()));
  }
  series.model_flops_per_second->Set(progress.tflops() * 1e12);
  series.step_seconds->Set(progress.step_seconds());
  series.data_loading_seconds->Set(progress.data_loading_seconds());
  series.data_loading_percent->Set(progress.data_loading_share());
  series.skipped_steps->Set(static_cast<double>(progress.skipped_steps()));
  series.elapsed_seconds->Set(progress.elapsed_seconds());
  series.memory_active_bytes->Set(progress.memory_active_gib() * kBytesPerGib);
  series.memory_peak_bytes->Set(progress.memory_peak_gib() * kBytesPerGib);
  // A counter only grows: a resume resets Job.restarts (the budget), not this count.
  const int previous = before != nullptr ? before->restarts() : 0;
  if (after.restarts() > previous) series.restarts->Increment(after.restarts() - previous);
}

}  // namespace flame::server
