// Trainer: flame's training loop (reference/flame_train.py) for one rank, in named phases like
// torchtitan's:
//
//   Run()
//     Setup()             tokenizer, model config, data loader, model, optimizer, schedule
//     Restore()           newest valid checkpoint (or checkpoint.load_step, else
//                         checkpoint.initial_load_path): weights, optimizer, train state, LR
//                         schedule, this rank's data position, less exclude_from_loading
//     loop: TrainStep()   ForwardBackward per micro-batch, one gradient reduction, clip,
//                         optimizer step (or skip on NaN/Inf), LR schedule
//           MaybeEvaluate()  held-out loss every metrics.eval_interval steps and at the end
//           MaybeLog()    global avg/max loss, lr, grad norm, tokens/s, MFU, memory, ... to
//                         stdout and the ProgressSink (rank 0), and to TensorBoard
//           MaybeCheckpoint()  every checkpoint.interval steps, at the end, and on pause
//
// The directive (continue / stop / pause / abandon) is read once per step and agreed on by all
// ranks inside the step's gradient reduction, so every rank leaves the loop after the same step.
// LibTorch exceptions stop at Run(): it returns a Status, never throws.
#pragma once

#include <torch/optim/optimizer.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/checkpoint_store.h"
#include "worker/config/model_config.h"
#include "worker/config/train_config.h"
#include "worker/data/prefetching_loader.h"
#include "worker/data/text_batch_loader.h"
#include "worker/data/tokenizer.h"
#include "worker/dist/communicator.h"
#include "worker/metrics/device_monitor.h"
#include "worker/metrics/evaluator.h"
#include "worker/metrics/step_profiler.h"
#include "worker/metrics/tensorboard_writer.h"
#include "worker/model/causal_lm.h"
#include "worker/optim/lr_schedule.h"
#include "worker/progress.h"

namespace flame::worker {

// What the process around the trainer provides. Not owned.
struct TrainerContext {
  Communicator* communicator = nullptr;
  ProgressSink* progress = nullptr;  // rank 0 reports; others may pass a NullProgressSink
  DirectiveSource* directives = nullptr;
};

enum class TrainOutcome { kCompleted, kStopped, kPaused, kAbandoned };

struct TrainResult {
  TrainOutcome outcome = TrainOutcome::kCompleted;
  int64_t step = 0;  // the last step trained
};

class Trainer {
 public:
  Trainer(TrainConfig config, TrainerContext context);
  ~Trainer();

  absl::StatusOr<TrainResult> Run();

  // The last completed step (what Finish reports after an error).
  int64_t step() const { return state_.step; }
  // Global average loss of every step this trainer ran, by step (for tests and logs).
  const std::map<int64_t, double>& step_losses() const { return step_losses_; }
  int64_t resumed_from_step() const { return resumed_from_step_; }
  // The model, for tests that compare ranks' weights.
  model::CausalLm& model() { return *model_; }

 private:
  absl::Status Setup();
  absl::Status SetupData();   // tokenizer -> documents -> batches
  absl::Status SetupModel();  // config.json -> model, optimizer
  absl::Status SetupMetrics();  // FLOPs per token, eval data, TensorBoard, profiler
  absl::Status OpenTensorBoard();
  absl::Status Restore();
  // Loads checkpoint (or HF-style) folder `dir`, restoring `parts` of it.
  absl::Status RestoreFrom(const std::string& dir, const CheckpointComponents& parts);
  absl::Status CreateSeedCheckpoint();
  absl::StatusOr<int64_t> ChooseCheckpoint();  // rank 0's choice, broadcast; -1: none
  absl::Status RestoreDataPosition(const CheckpointState& saved);
  absl::StatusOr<Directive> TrainStep();
  absl::StatusOr<double> ForwardBackward();  // one micro-batch; returns its loss
  Directive ReduceGradients(Directive local, double* loss);
  void BroadcastParameters();
  absl::StatusOr<bool> MaybeEvaluate(bool last, Directive directive);  // whether it ran
  absl::Status MaybeLog(bool force);
  void WriteTensorBoard(const ProgressUpdate& progress);
  absl::Status MaybeCheckpoint(Directive directive);
  absl::Status SaveCheckpoint();
  void LogBanner() const;
  double ElapsedSeconds() const;

  TrainConfig config_;
  TrainerContext context_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;

  ModelConfig model_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<BatchSource> batches_;
  std::shared_ptr<model::CausalLm> model_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<CheckpointStore> checkpoints_;

  TrainState state_;
  int64_t resumed_from_step_ = 0;
  int64_t last_saved_step_ = -1;
  double elapsed_before_ = 0;  // restored elapsed seconds of earlier attempts
  std::chrono::steady_clock::time_point start_time_;
  std::map<int64_t, double> step_losses_;

  // Since the last log line.
  struct Window {
    std::vector<double> local_losses;
    int64_t local_tokens = 0;
    double data_seconds = 0;
    std::chrono::steady_clock::time_point start;
  } window_;
  double last_grad_norm_ = 0;

  // Metrics (SetupMetrics).
  double flops_per_token_ = 0;
  std::optional<double> peak_flops_;  // none on CPU and unknown accelerators: MFU 0
  std::unique_ptr<DeviceMonitor> device_monitor_;
  std::unique_ptr<Evaluator> evaluator_;  // null without metrics.eval_interval
  double eval_loss_ = 0;
  int64_t eval_step_ = 0;                         // 0: no evaluation yet
  std::unique_ptr<EventFileWriter> tensorboard_;  // null unless this rank writes events
  std::unique_ptr<StepProfiler> profiler_;
};

}  // namespace flame::worker
