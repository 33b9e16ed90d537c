#include "worker/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/checkpoint/exporter.h"
#include "worker/checkpoint/model_weights.h"
#include "worker/config/flop_count.h"
#include "worker/data/tokenizer_factory.h"
#include "worker/metrics/peak_flops.h"
#include "worker/metrics/report_format.h"
#include "worker/optim/optimizer.h"

namespace flame::worker {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Lines for the job log: stdout, flushed, so that `flamectl logs -f` sees them at once.
void Print(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

Trainer::Trainer(TrainConfig config, TrainerContext context)
    : config_(std::move(config)), context_(context) {}

Trainer::~Trainer() = default;

absl::StatusOr<TrainResult> Trainer::Run() {
  // The one boundary where LibTorch exceptions (c10::Error, std::exception) become a Status.
  try {
    FLAME_RETURN_IF_ERROR(Setup());
    if (config_.checkpoint.create_seed_checkpoint) {
      FLAME_RETURN_IF_ERROR(CreateSeedCheckpoint());
      return TrainResult{TrainOutcome::kCompleted, 0};
    }
    FLAME_RETURN_IF_ERROR(Restore());
    BroadcastParameters();
    LogBanner();
    start_time_ = Clock::now();
    window_ = Window{};
    window_.start = start_time_;
    while (state_.step < config_.training.steps) {
      profiler_->BeforeStep(state_.step + 1);
      FLAME_ASSIGN_OR_RETURN(const Directive directive, TrainStep());
      FLAME_RETURN_IF_ERROR(profiler_->AfterStep(state_.step));
      const bool last = state_.step == config_.training.steps;
      FLAME_ASSIGN_OR_RETURN(const bool evaluated, MaybeEvaluate(last, directive));
      FLAME_RETURN_IF_ERROR(
          MaybeLog(/*force=*/last || evaluated || directive != Directive::kContinue));
      if (directive == Directive::kAbandon) return TrainResult{TrainOutcome::kAbandoned, step()};
      FLAME_RETURN_IF_ERROR(MaybeCheckpoint(directive));
      if (directive == Directive::kStop) return TrainResult{TrainOutcome::kStopped, step()};
      if (directive == Directive::kCheckpointStop) {
        return TrainResult{TrainOutcome::kPaused, step()};
      }
    }
    return TrainResult{TrainOutcome::kCompleted, step()};
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("step ", state_.step + 1, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("step ", state_.step + 1, ": ", e.what()));
  }
}

absl::Status Trainer::Setup() {
  FLAME_RETURN_IF_ERROR(ValidateTrainConfig(config_));
  rank_ = context_.communicator->rank();
  world_size_ = context_.communicator->world_size();
  if (config_.device == "cuda") {
    return absl::UnimplementedError("resources.device = cuda: this flame-worker runs on CPU only");
  }
  torch::manual_seed(static_cast<uint64_t>(config_.training.seed));
  at::globalContext().setDeterministicAlgorithms(config_.training.deterministic, false);
  FLAME_ASSIGN_OR_RETURN(tokenizer_, LoadTokenizer(config_.tokenizer_path));
  FLAME_RETURN_IF_ERROR(SetupData());
  FLAME_RETURN_IF_ERROR(SetupModel());
  FLAME_RETURN_IF_ERROR(SetupMetrics());
  schedule_ = std::make_unique<LrSchedule>(config_.lr_scheduler, config_.training.steps,
                                           config_.optimizer.lr);
  checkpoints_ = std::make_unique<CheckpointStore>(config_.CheckpointRoot());
  if (rank_ == 0 && config_.print_args) Print(DescribeTrainConfig(config_));
  return absl::OkStatus();
}

absl::Status Trainer::SetupData() {
  LoaderOptions data;
  data.sources = config_.training.dataset;  // each entry is one source
  data.probs = config_.training.data_probs;
  data.seed = static_cast<uint64_t>(config_.training.seed);
  data.batch_size = config_.training.batch_size;
  data.seq_len = config_.training.seq_len;
  data.rank = rank_;
  data.world_size = world_size_;
  data.varlen = config_.training.varlen;
  data.context_len = config_.training.context_len;
  // num_workers >= 2: that many threads tokenize, besides the one that prefetches batches.
  data.tokenizer_threads =
      config_.training.num_workers >= 2 ? static_cast<int>(config_.training.num_workers) : 0;
  FLAME_ASSIGN_OR_RETURN(std::unique_ptr<TextBatchLoader> loader,
                         TextBatchLoader::Create(data, tokenizer_.get()));
  // num_workers 0: tokenize on this thread; otherwise a background thread keeps batches ready.
  if (config_.training.num_workers == 0) {
    batches_ = std::make_unique<DirectBatchSource>(std::move(loader));
  } else {
    batches_ = std::make_unique<PrefetchingBatchSource>(std::move(loader), /*depth=*/2);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetupModel() {
  FLAME_ASSIGN_OR_RETURN(model_config_, LoadModelConfig(config_.model_config));
  if (tokenizer_->VocabSize() > model_config_.vocab_size) {
    // flame: config.vocab_size = max(tokenizer.vocab_size, config.vocab_size).
    FLAME_LOG(WARNING) << "vocab_size " << model_config_.vocab_size << " is below the tokenizer's "
                       << tokenizer_->VocabSize() << "; using the tokenizer's";
    model_config_.vocab_size = tokenizer_->VocabSize();
  }
  if (rank_ == 0 && tokenizer_->BosId() != model_config_.bos_token_id) {
    FLAME_LOG(WARNING) << "the tokenizer's BOS id is " << tokenizer_->BosId()
                       << ", the model config's bos_token_id " << model_config_.bos_token_id;
  }
  model_ = model::BuildCausalLm(model_config_, static_cast<uint64_t>(config_.training.seed));
  model_->train();
  parameters_ = model_->parameters();
  optimizer_ = BuildOptimizer(config_.optimizer, parameters_);
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "model " << DescribeModelConfig(model_config_);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetupMetrics() {
  const torch::Device device = parameters_.front().device();
  device_monitor_ = std::make_unique<DeviceMonitor>(device);
  // Attention spans a packed row (seq_len), or one document segment in varlen mode.
  const TrainingConfig& t = config_.training;
  const int64_t span = t.varlen ? std::min(t.context_len, t.seq_len) : t.seq_len;
  flops_per_token_ = TrainingFlopsPerToken(model_config_, span);
  const std::string accelerator = device_monitor_->AcceleratorName();
  if (!accelerator.empty()) peak_flops_ = PeakBf16Flops(accelerator);
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "training FLOPs per token: " << flops_per_token_
                    << " (matrix multiplies, forward + backward; README: Metrics)";
    if (accelerator.empty()) {
      FLAME_LOG(INFO) << "MFU is not defined on CPU ranks (no peak FLOPS): reported as 0";
    } else if (!peak_flops_) {
      FLAME_LOG(WARNING) << "no bf16 peak FLOPS known for \"" << accelerator
                         << "\": MFU reported as 0";
    }
    if (config_.metrics.enable_wandb) {
      FLAME_LOG(WARNING) << "metrics.enable_wandb: Weights & Biases is not reachable from flame; "
                         << "the same metrics go to flamed's Prometheus endpoint (/metrics)"
                         << (config_.metrics.enable_tensorboard ? " and to TensorBoard" : "");
    }
  }
  if (config_.metrics.eval_interval > 0) {
    FLAME_ASSIGN_OR_RETURN(evaluator_,
                           Evaluator::Create(config_, tokenizer_.get(), rank_, world_size_));
  }
  profiler_ = std::make_unique<StepProfiler>(config_.profiling, config_.dump_folder, rank_, device);
  return config_.metrics.enable_tensorboard ? OpenTensorBoard() : absl::OkStatus();
}

absl::Status Trainer::OpenTensorBoard() {
  // Every rank's folder carries rank 0's start time (flame's <YYYYmmdd-HHMM>).
  const bool all_ranks = config_.metrics.save_for_all_ranks;
  const int64_t now_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  torch::Tensor start = torch::tensor({static_cast<double>(now_seconds)}, torch::kFloat64);
  if (all_ranks) context_.communicator->Broadcast(start, 0);
  if (rank_ != 0 && !all_ranks) return absl::OkStatus();
  const std::string folder =
      TensorBoardRunFolder(config_.dump_folder, config_.metrics.save_tb_folder,
                           static_cast<int64_t>(start.item<double>()), rank_, all_ranks);
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(folder);
  if (!writer.ok()) {
    return absl::Status(writer.status().code(),
                        absl::StrCat("metrics.enable_tensorboard: ", writer.status().message()));
  }
  tensorboard_ = *std::move(writer);
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "TensorBoard events: " << tensorboard_->path();
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::ChooseCheckpoint() {
  // Rank 0 decides and tells the others, so that all ranks load the same step even if the
  // folder changes while they look (rank 0 removes interrupted saves first).
  int64_t chosen = -1;
  absl::Status status;
  if (rank_ == 0) {
    status = MakeDirectories(checkpoints_->root());
    if (status.ok()) status = checkpoints_->RemoveTemporaries();
    const int64_t requested = config_.checkpoint.load_step;
    if (status.ok() && requested >= 0) {
      status = checkpoints_->Verify(requested);
      if (status.ok()) {
        chosen = requested;
      } else {
        status = absl::FailedPreconditionError(absl::StrCat(
            "checkpoint.load_step = ", requested, ": cannot load it: ", status.message()));
      }
    } else if (status.ok()) {
      chosen = checkpoints_->FindNewestValid().value_or(-1);
    }
  }
  // -2 carries rank 0's failure to the other ranks.
  torch::Tensor choice = torch::tensor({status.ok() ? chosen : int64_t{-2}}, torch::kFloat64);
  context_.communicator->Broadcast(choice, 0);
  if (!status.ok()) return status;
  const auto agreed = static_cast<int64_t>(choice.item<double>());
  if (agreed == -2) return absl::AbortedError("rank 0 could not choose a checkpoint");
  return agreed;
}

absl::Status Trainer::Restore() {
  // Unlike flame, this runs even with enable_checkpoint off: the dump folder belongs to this job,
  // so a checkpoint in it can only be this job's own, written when it was paused (a pause always
  // saves), and a resumed job must continue from it.
  FLAME_ASSIGN_OR_RETURN(const int64_t step, ChooseCheckpoint());
  const CheckpointConfig& c = config_.checkpoint;
  FLAME_ASSIGN_OR_RETURN(CheckpointComponents parts, ComponentsToLoad(c.exclude_from_loading));
  const CheckpointComponents model_only = {.model = parts.model,
                                           .optimizer = false,
                                           .lr_scheduler = false,
                                           .dataloader = false,
                                           .train_state = false};
  std::string dir;
  if (step >= 0) {
    dir = checkpoints_->StepPath(step);
    if (step == 0) parts = model_only;  // flame: step 0 is a seed, its weights are all it has
  } else if (!c.initial_load_path.empty()) {
    // Only a job without checkpoints of its own starts from initial_load_path.
    dir = c.initial_load_path;
    if (c.initial_load_model_weights_only) parts = model_only;
  } else {
    return absl::OkStatus();  // a fresh start
  }
  absl::Status status = RestoreFrom(dir, parts);
  // Every rank loads; all of them learn if one failed, so none waits for the others forever.
  torch::Tensor failed = torch::tensor({status.ok() ? 0.0 : 1.0}, torch::kFloat64);
  context_.communicator->AllReduce(failed, ReduceOp::kMax);
  if (!status.ok()) return status;
  if (failed.item<double>() > 0) return absl::AbortedError("another rank failed to restore " + dir);
  return absl::OkStatus();
}

absl::Status Trainer::RestoreFrom(const std::string& dir, const CheckpointComponents& parts) {
  if (!CheckpointStore::IsCheckpointDirectory(dir)) {
    // An HF-style folder (initial_load_path): weights are all it has.
    if (parts.model) FLAME_RETURN_IF_ERROR(ImportHfFolder(dir, *model_));
    if (rank_ == 0) {
      FLAME_LOG(INFO) << "loaded the model weights of " << dir;
    }
    return absl::OkStatus();
  }
  FLAME_RETURN_IF_ERROR(CheckpointStore::VerifyDirectory(dir));
  CheckpointState saved;
  FLAME_RETURN_IF_ERROR(
      CheckpointStore::LoadDirectory(dir, parts, &saved, *model_, optimizer_.get()));
  const bool resuming =
      parts.optimizer || parts.lr_scheduler || parts.dataloader || parts.train_state;
  if (saved.kind == CheckpointKind::kWeightsOnly && resuming) {
    // The final save of a run with last_save_model_weights_only: fine for a run that is over,
    // but the optimizer and data state to go on from it are gone.
    if (!(parts.train_state && saved.train_state.step >= config_.training.steps)) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir,
          " holds model weights only (checkpoint.last_save_model_weights_only), so training "
          "cannot resume from it: set checkpoint.load_step to an earlier full checkpoint, "
          "or start a new run from it with checkpoint.initial_load_path"));
    }
    if (rank_ == 0) {
      FLAME_LOG(INFO) << dir << " is the final weights-only save at step " << saved.train_state.step
                      << ": nothing left to train";
    }
  }
  if (parts.train_state && !config_.spec_hash.empty() && saved.spec_hash != config_.spec_hash) {
    FLAME_LOG(WARNING) << dir << " was written by a job spec with another hash (" << saved.spec_hash
                       << "): the job changed since";
  }
  if (parts.dataloader && saved.kind == CheckpointKind::kFull) {
    FLAME_RETURN_IF_ERROR(RestoreDataPosition(saved));
  }
  if (parts.train_state) {
    state_ = saved.train_state;
    elapsed_before_ = state_.elapsed_seconds;
    resumed_from_step_ = state_.step;
    last_saved_step_ = state_.step;
  }
  // The LR schedule goes on from where it stood, or restarts, independently of the step.
  state_.lr_scheduler_steps = parts.lr_scheduler ? saved.train_state.lr_scheduler_steps : 0;
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "restored " << dir << (resuming ? "" : " (model weights only)");
  }
  return absl::OkStatus();
}

absl::Status Trainer::RestoreDataPosition(const CheckpointState& saved) {
  std::vector<DataPosition> positions;
  bool legacy = false;
  for (const std::string& encoded : saved.data_positions) {
    FLAME_ASSIGN_OR_RETURN(DataPosition position, DecodeDataPosition(encoded));
    legacy = legacy || position.legacy;
    positions.push_back(std::move(position));
  }
  if (legacy && !UpgradeLegacyDataPositions(&positions) && rank_ == 0) {
    FLAME_LOG(WARNING) << "the checkpoint's data positions are in the old format and its ranks "
                       << "stood in different epochs: every rank restarts at the earliest saved "
                       << "document (a few documents are seen twice)";
  }
  const auto sources = static_cast<int64_t>(config_.training.dataset.size());
  FLAME_RETURN_IF_ERROR(ValidateDataPositions(positions, sources));
  const auto saved_ranks = static_cast<int64_t>(positions.size());
  if (saved_ranks == world_size_) return batches_->Restore(positions[static_cast<size_t>(rank_)]);
  // Another rank count: the old ranks' unread data is dealt out to the new ranks exactly.
  if (rank_ == 0) {
    FLAME_LOG(INFO) << "the checkpoint was written by " << saved_ranks << " ranks, this run has "
                    << world_size_ << ": their data positions are redistributed (no document is "
                    << "repeated or skipped)";
  }
  FLAME_ASSIGN_OR_RETURN(std::vector<DataPosition> resharded,
                         ReshardDataPositions(positions, world_size_));
  return batches_->Restore(resharded[static_cast<size_t>(rank_)]);
}

void Trainer::BroadcastParameters() {
  // Identical initial weights on every rank: rank 0's, after its initialisation or restore.
  if (world_size_ == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : parameters_) flat.push_back(p.detach().flatten());
  torch::Tensor buffer = torch::cat(flat);
  context_.communicator->Broadcast(buffer, 0);
  int64_t offset = 0;
  for (torch::Tensor& p : parameters_) {
    p.copy_(buffer.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
}

absl::StatusOr<Directive> Trainer::TrainStep() {
  const int64_t step = state_.step + 1;
  const int64_t accumulation = config_.training.gradient_accumulation_steps;
  // flame's LambdaLR: optimizer step s (1-based) uses factor(s - 1), counted by the schedule's
  // own steps (they differ from the step only after a load that excluded one of the two).
  SetLearningRate(*optimizer_, schedule_->LearningRate(state_.lr_scheduler_steps));
  optimizer_->zero_grad(/*set_to_none=*/true);
  double loss_sum = 0;
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    FLAME_ASSIGN_OR_RETURN(const double loss, ForwardBackward());
    loss_sum += loss;
  }
  double loss = loss_sum / static_cast<double>(accumulation);  // this rank's
  window_.local_losses.push_back(loss);
  const Directive directive = ReduceGradients(context_.directives->Current(step), &loss);

  last_grad_norm_ = ClipGradNorm(parameters_, config_.training.max_norm);
  if (!std::isfinite(last_grad_norm_) && config_.training.skip_nan_inf) {
    FLAME_LOG(WARNING) << "step " << step << ": skipping the optimizer step, gradient norm is "
                       << last_grad_norm_;
    optimizer_->zero_grad(/*set_to_none=*/true);
    ++state_.skipped_steps;
  } else {
    optimizer_->step();
  }
  state_.step = step;
  ++state_.lr_scheduler_steps;
  state_.tokens +=
      accumulation * config_.training.batch_size * config_.training.seq_len * world_size_;
  step_losses_[step] = loss;
  return directive;
}

absl::StatusOr<double> Trainer::ForwardBackward() {
  const Clock::time_point data_start = Clock::now();
  FLAME_ASSIGN_OR_RETURN(Batch batch, batches_->Next());
  window_.data_seconds += Seconds(Clock::now() - data_start);
  window_.local_tokens += batch.batch_size * batch.seq_len;

  const torch::Tensor ids =
      torch::from_blob(batch.ids.data(), {batch.batch_size, batch.seq_len}, torch::kInt32)
          .to(torch::kInt64);  // [B, T]; labels are the same ids (the model shifts them)
  torch::Tensor cu_seqlens;
  if (!batch.cu_seqlens.empty()) {
    cu_seqlens = torch::tensor(batch.cu_seqlens, torch::kInt64);  // [N + 1]
  }
  const model::CausalLmOutput out = model_->Forward(ids, ids, cu_seqlens);
  // Each micro-batch adds 1/GA of its gradient: the step's gradient is the mean over them.
  (out.loss / static_cast<double>(config_.training.gradient_accumulation_steps)).backward();
  return out.loss.item<double>();
}

Directive Trainer::ReduceGradients(Directive local, double* loss) {
  // One all-reduce (average) per step carries the gradients, this step's loss and the
  // directive as one-hot flags: a flag above 0 after averaging means some rank saw it.
  constexpr int64_t kFlags = 3;  // stop, checkpoint-stop, abandon
  if (world_size_ == 1) return local;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces;
  for (torch::Tensor& p : parameters_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    pieces.push_back(p.grad().flatten());
  }
  torch::Tensor tail = torch::zeros({1 + kFlags}, torch::kFloat32);
  tail[0] = *loss;
  if (local != Directive::kContinue) tail[static_cast<int>(local)] = 1.0;
  pieces.push_back(tail);
  torch::Tensor buffer = torch::cat(pieces);
  context_.communicator->AllReduce(buffer, ReduceOp::kAvg);

  int64_t offset = 0;
  for (torch::Tensor& p : parameters_) {
    p.grad().copy_(buffer.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  const torch::Tensor reduced = buffer.narrow(0, offset, 1 + kFlags);
  *loss = reduced[0].item<double>();
  Directive agreed = Directive::kContinue;
  for (int flag = 1; flag <= kFlags; ++flag) {
    if (reduced[flag].item<float>() > 0) agreed = static_cast<Directive>(flag);
  }
  return agreed;
}

absl::StatusOr<bool> Trainer::MaybeEvaluate(bool last, Directive directive) {
  const int64_t interval = config_.metrics.eval_interval;
  if (evaluator_ == nullptr || directive == Directive::kAbandon) return false;
  if (!last && state_.step % interval != 0) return false;
  const Clock::time_point start = Clock::now();
  const absl::StatusOr<double> local = evaluator_->LocalLoss(*model_);
  // One sum over ranks carries the losses and any rank's failure, so all ranks stop together.
  torch::Tensor reduced =
      torch::tensor({local.ok() ? *local : 0.0, local.ok() ? 0.0 : 1.0}, torch::kFloat64);
  context_.communicator->AllReduce(reduced, ReduceOp::kSum);
  if (!local.ok()) return local.status();
  if (reduced[1].item<double>() > 0) return absl::AbortedError("another rank failed to evaluate");
  eval_loss_ = reduced[0].item<double>() / static_cast<double>(world_size_);
  eval_step_ = state_.step;
  // The evaluation is not training: keep its time out of this window's tokens/s and step time.
  window_.start += Clock::now() - start;
  return true;
}

absl::Status Trainer::MaybeLog(bool force) {
  const int64_t step = state_.step;
  if (!(force || step == 1 || step % config_.metrics.log_freq == 0)) return absl::OkStatus();
  // flame: the mean of this rank's step losses since the last log, averaged over ranks, and
  // their maximum over ranks.
  const std::vector<double>& losses = window_.local_losses;
  const auto window_steps = static_cast<double>(losses.size());
  double sum = 0, max = -INFINITY;
  for (double l : losses) sum += l, max = std::max(max, l);
  torch::Tensor avg_loss = torch::tensor({sum / window_steps}, torch::kFloat64);
  torch::Tensor max_loss = torch::tensor({max}, torch::kFloat64);
  context_.communicator->AllReduce(avg_loss, ReduceOp::kAvg);
  context_.communicator->AllReduce(max_loss, ReduceOp::kMax);

  const double window_seconds = std::max(1e-9, Seconds(Clock::now() - window_.start));
  ProgressUpdate p;
  p.step = step;
  p.total_steps = config_.training.steps;
  p.tokens = state_.tokens;
  p.loss = avg_loss.item<double>();
  p.max_loss = max_loss.item<double>();
  // Like flame, the LR shown is the scheduler's value after this step (the next step's LR).
  p.lr = schedule_->LearningRate(state_.lr_scheduler_steps);
  p.grad_norm = last_grad_norm_;
  p.tokens_per_second = static_cast<double>(window_.local_tokens) / window_seconds;
  p.tflops = flops_per_token_ * p.tokens_per_second / 1e12;
  if (peak_flops_) p.mfu = 100.0 * flops_per_token_ * p.tokens_per_second / *peak_flops_;
  const MemorySample memory = device_monitor_->Sample();
  p.memory_gib = memory.reserved_gib;
  p.memory_active_gib = memory.active_gib;
  p.memory_peak_gib = memory.peak_gib;
  p.step_seconds = window_seconds / window_steps;
  p.data_loading_seconds = window_.data_seconds / window_steps;
  p.data_loading_share = 100.0 * window_.data_seconds / window_seconds;
  p.skipped_steps = state_.skipped_steps;
  p.elapsed_seconds = ElapsedSeconds();
  p.resumed_from_step = resumed_from_step_;
  p.eval_loss = eval_loss_;
  p.eval_step = eval_step_;
  state_.elapsed_seconds = p.elapsed_seconds;

  if (rank_ == 0) {
    const int64_t done = step - resumed_from_step_;
    const double eta = (ElapsedSeconds() - elapsed_before_) / static_cast<double>(done) *
                       static_cast<double>(config_.training.steps - step);
    Print(FormatProgressLine(p, eta));
    if (eval_step_ == step) Print(FormatEvalLine(p, evaluator_->batches()));
    context_.progress->ReportProgress(p);
  }
  WriteTensorBoard(p);
  window_ = Window{};
  window_.start = Clock::now();
  return absl::OkStatus();
}

void Trainer::WriteTensorBoard(const ProgressUpdate& progress) {
  if (tensorboard_ == nullptr) return;
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const absl::Status status =
      tensorboard_->WriteScalars(progress.step, wall_time, FlameScalars(progress));
  if (!status.ok()) {
    // Losing the event file must not cost the run: the same facts still reach flamed.
    FLAME_LOG(WARNING) << status.message() << "; no more TensorBoard events from this rank";
    tensorboard_.reset();
  }
}

absl::Status Trainer::MaybeCheckpoint(Directive directive) {
  const int64_t step = state_.step;
  const bool due = config_.checkpoint.enable_checkpoint &&
                   (step % config_.checkpoint.interval == 0 || step == config_.training.steps);
  // A pause always saves: PAUSED promises a checkpoint to resume from.
  if ((due || directive == Directive::kCheckpointStop) && step != last_saved_step_) {
    return SaveCheckpoint();
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint() {
  // Every rank's data position goes into the checkpoint: gathered to all, written by rank 0.
  CheckpointState checkpoint;
  checkpoint.train_state = state_;
  checkpoint.train_state.elapsed_seconds = ElapsedSeconds();
  checkpoint.spec_hash = config_.spec_hash;
  checkpoint.world_size = world_size_;
  checkpoint.data_positions =
      context_.communicator->AllGather(EncodeDataPosition(batches_->Position()));
  // flame's last_save_model_weights_only: the final save keeps the weights, in export_dtype.
  const bool weights_only =
      config_.checkpoint.last_save_model_weights_only && state_.step == config_.training.steps;
  absl::Status status;
  if (rank_ == 0) {
    absl::StatusOr<CheckpointInfo> saved = absl::UnknownError("not saved");
    if (weights_only) {
      absl::StatusOr<torch::ScalarType> dtype = ParseExportDtype(config_.checkpoint.export_dtype);
      saved = dtype.ok() ? checkpoints_->SaveWeightsOnly(checkpoint, *model_, *dtype)
                         : absl::StatusOr<CheckpointInfo>(dtype.status());
    } else {
      saved = checkpoints_->Save(checkpoint, *model_, *optimizer_);
    }
    status = saved.status();
    if (saved.ok()) {
      status = checkpoints_->Prune(config_.checkpoint.keep_latest_k);
      Print(absl::StrCat("saved checkpoint ", saved->path, " (", Grouped(saved->bytes), " bytes)"));
      context_.progress->CommitCheckpoint(*saved);
    }
  }
  // All ranks learn whether rank 0 succeeded, so they stop together instead of waiting on it.
  torch::Tensor failed = torch::tensor({status.ok() ? 0.0 : 1.0}, torch::kFloat64);
  context_.communicator->AllReduce(failed, ReduceOp::kMax);
  if (!status.ok()) return status;
  if (failed.item<double>() > 0) return absl::AbortedError("rank 0 failed to save a checkpoint");
  last_saved_step_ = state_.step;
  return absl::OkStatus();
}

absl::Status Trainer::CreateSeedCheckpoint() {
  // flame's create_seed_checkpoint: step-0 holds the initial weights, for runs that should all
  // start from the same ones (they load step 0 as weights only).
  if (world_size_ != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.create_seed_checkpoint needs a single rank (resources.ranks = 1); this run "
        "has ",
        world_size_));
  }
  FLAME_RETURN_IF_ERROR(MakeDirectories(checkpoints_->root()));
  FLAME_RETURN_IF_ERROR(checkpoints_->RemoveTemporaries());
  const std::vector<int64_t> steps = checkpoints_->ListSteps();
  if (!steps.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.create_seed_checkpoint: ", checkpoints_->root(), " already holds step-",
        steps.back(), "; a seed checkpoint starts a new run in an empty checkpoint folder"));
  }
  CheckpointState seed;
  seed.spec_hash = config_.spec_hash;
  seed.world_size = world_size_;
  FLAME_ASSIGN_OR_RETURN(const CheckpointInfo saved,
                         checkpoints_->SaveWeightsOnly(seed, *model_, torch::kFloat32));
  Print(absl::StrCat("saved seed checkpoint ", saved.path));
  context_.progress->CommitCheckpoint(saved);
  return absl::OkStatus();
}

double Trainer::ElapsedSeconds() const {
  return elapsed_before_ + Seconds(Clock::now() - start_time_);
}

void Trainer::LogBanner() const {
  if (rank_ != 0) return;
  const TrainingConfig& t = config_.training;
  const int64_t global_batch = t.batch_size * world_size_ * t.gradient_accumulation_steps;
  const int64_t tokens_per_step = global_batch * t.seq_len;
  const int64_t warmup = schedule_->warmup_steps();
  Print("***** Running training *****");
  Print(absl::StrCat("  Training starts at step ", state_.step + 1));
  Print(absl::StrCat("  Number of tokens per sequence = ", Grouped(t.seq_len)));
  Print(absl::StrCat("  Gradient Accumulation steps = ", t.gradient_accumulation_steps));
  Print(absl::StrCat("  Instantaneous batch size (per device) = ", Grouped(t.batch_size)));
  Print(absl::StrCat("  Global batch size (w. parallel, distributed & accumulation) = ",
                     Grouped(global_batch), " (", Grouped(tokens_per_step), " tokens)"));
  Print(absl::StrCat("  Total optimization steps = ", Grouped(t.steps), " (",
                     Grouped(t.steps * tokens_per_step), " tokens)"));
  Print(absl::StrCat("  Warmup steps = ", Grouped(warmup), " (", Grouped(warmup * tokens_per_step),
                     " tokens)"));
  Print(absl::StrCat("  Number of parameters = ", Grouped(model::CountParameters(*model_))));
}

}  // namespace flame::worker
