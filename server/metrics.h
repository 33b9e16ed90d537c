// flamed's Prometheus metrics (prometheus-cpp), kept current from JobManager changes.
//
//   flame_jobs{state}                        gauge: jobs in each state (every state, 0 included)
//   flame_job_step{job_id}                   gauge: latest logged step
//   flame_job_loss{job_id}                   gauge: loss_metrics/global_avg_loss
//   flame_job_learning_rate{job_id}          gauge: optimizer/lr
//   flame_job_grad_norm{job_id}              gauge: optimizer/grad_norm
//   flame_job_tokens_per_second{job_id}      gauge: throughput per device
//   flame_job_tokens{job_id}                 gauge: tokens seen, all ranks
//   flame_job_mfu_percent{job_id}            gauge: model FLOPs utilisation, 0..100
//   flame_job_memory_bytes{job_id}           gauge: peak memory of a rank
//   flame_job_max_loss{job_id}               gauge: loss_metrics/global_max_loss
//   flame_job_eval_loss{job_id}              gauge: held-out loss of the latest evaluation
//   flame_job_eval_step{job_id}              gauge: the step it ran at
//                                            (both exported from the first evaluation on)
//   flame_job_model_flops_per_second{job_id} gauge: model FLOPs per second per device
//   flame_job_step_seconds{job_id}           gauge: mean step time since the previous report
//   flame_job_data_loading_seconds{job_id}   gauge: mean wait for data per step
//   flame_job_data_loading_percent{job_id}   gauge: share of the step time waiting for data
//   flame_job_skipped_steps{job_id}          gauge: updates skipped for a NaN/Inf gradient norm
//   flame_job_elapsed_seconds{job_id}        gauge: training time over all attempts
//   flame_job_memory_active_bytes{job_id}    gauge: peak active CUDA memory (0 on CPU)
//   flame_job_memory_peak_bytes{job_id}      gauge: largest memory of the rank so far
//   flame_job_restarts_total{job_id}         counter: automatic restarts
//
// Tokens, skipped steps and elapsed time are gauges although they mostly grow: a restart resumes
// from a checkpoint and takes them back to that checkpoint's values, which a counter cannot do.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flame/v1/job.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/job_listener.h"

namespace prometheus {
class Exposer;
}

namespace flame::server {

class Metrics final : public JobListener {
 public:
  // Metrics served over HTTP at http://<listen_address>/metrics ("HOST:PORT"; port 0 picks a
  // free one, see port()).
  static absl::StatusOr<std::unique_ptr<Metrics>> Serve(const std::string& listen_address);
  // Metrics without an HTTP endpoint (tests read them with Render()).
  Metrics();
  ~Metrics() override;

  // The bound HTTP port; 0 without an endpoint.
  int port() const { return port_; }
  // The Prometheus text exposition of every metric, as a scrape would return it.
  std::string Render() const;

  void OnJobChanged(const flame::v1::Job* before, const flame::v1::Job& after) override;

 private:
  struct JobSeries {
    prometheus::Gauge* step;
    prometheus::Gauge* loss;
    prometheus::Gauge* learning_rate;
    prometheus::Gauge* grad_norm;
    prometheus::Gauge* tokens_per_second;
    prometheus::Gauge* tokens;
    prometheus::Gauge* mfu_percent;
    prometheus::Gauge* memory_bytes;
    prometheus::Gauge* max_loss;
    prometheus::Gauge* eval_loss;  // null until the job's first evaluation
    prometheus::Gauge* eval_step;
    prometheus::Gauge* model_flops_per_second;
    prometheus::Gauge* step_seconds;
    prometheus::Gauge* data_loading_seconds;
    prometheus::Gauge* data_loading_percent;
    prometheus::Gauge* skipped_steps;
    prometheus::Gauge* elapsed_seconds;
    prometheus::Gauge* memory_active_bytes;
    prometheus::Gauge* memory_peak_bytes;
    prometheus::Counter* restarts;
  };

  JobSeries& SeriesFor(const std::string& job_id);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& learning_rate_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& tokens_;
  prometheus::Family<prometheus::Gauge>& mfu_percent_;
  prometheus::Family<prometheus::Gauge>& memory_bytes_;
  prometheus::Family<prometheus::Gauge>& max_loss_;
  prometheus::Family<prometheus::Gauge>& eval_loss_;
  prometheus::Family<prometheus::Gauge>& eval_step_;
  prometheus::Family<prometheus::Gauge>& model_flops_per_second_;
  prometheus::Family<prometheus::Gauge>& step_seconds_;
  prometheus::Family<prometheus::Gauge>& data_loading_seconds_;
  prometheus::Family<prometheus::Gauge>& data_loading_percent_;
  prometheus::Family<prometheus::Gauge>& skipped_steps_;
  prometheus::Family<prometheus::Gauge>& elapsed_seconds_;
  prometheus::Family<prometheus::Gauge>& memory_active_bytes_;
  prometheus::Family<prometheus::Gauge>& memory_peak_bytes_;
  prometheus::Family<prometheus::Counter>& restarts_;
  std::map<flame::v1::JobState, prometheus::Gauge*> by_state_;
  std::map<std::string, JobSeries> series_;  // by job id
};

}  // namespace flame::server
