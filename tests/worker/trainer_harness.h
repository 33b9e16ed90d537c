// Running Trainers in tests without a coordinator: recording sinks, scripted directives, and one-
// and two-rank runs that return what a test compares (result, per-step losses, weights).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/dist/communicator.h"
#include "worker/trainer.h"

namespace flame::worker::testing {

class RecordingSink final : public ProgressSink {
 public:
  void ReportProgress(const ProgressUpdate& progress) override {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_.push_back(progress);
  }
  void CommitCheckpoint(const CheckpointInfo& checkpoint) override {
    std::lock_guard<std::mutex> lock(mutex_);
    checkpoints_.push_back(checkpoint);
  }
  std::vector<ProgressUpdate> progress_;
  std::vector<CheckpointInfo> checkpoints_;

 private:
  std::mutex mutex_;
};

// Continue until a given step, then answer `then` (the trainer asks once per step, during it).
class DirectiveAt final : public DirectiveSource {
 public:
  DirectiveAt(int64_t step, Directive then) : step_(step), then_(then) {}
  Directive Current(int64_t step) override { return step >= step_ ? then_ : Directive::kContinue; }

 private:
  int64_t step_;
  Directive then_;
};

struct RunRecord {
  absl::StatusOr<TrainResult> result = absl::UnknownError("not run");
  std::map<int64_t, double> losses;  // rank 0's (the global average on every rank)
  int64_t resumed_from = 0;
  std::map<std::string, torch::Tensor> weights;  // rank 0's final parameters
  std::vector<ProgressUpdate> progress;          // rank 0's reports
};

inline RunRecord Record(Trainer& trainer, absl::StatusOr<TrainResult> result) {
  RunRecord run;
  run.result = std::move(result);
  run.losses = trainer.step_losses();
  run.resumed_from = trainer.resumed_from_step();
  if (!run.result.ok()) return run;  // the model may not exist
  for (const auto& item : trainer.model().named_parameters()) {
    run.weights[item.key()] = item.value().detach().clone();
  }
  return run;
}

// One rank; `directives` null means always continue.
inline RunRecord Train(const TrainConfig& config, DirectiveSource* directives = nullptr) {
  LocalCommunicator communicator;
  RecordingSink sink;
  ContinueDirectiveSource keep_going;
  Trainer trainer(config, {&communicator, &sink, directives != nullptr ? directives : &keep_going});
  RunRecord run = Record(trainer, trainer.Run());
  run.progress = sink.progress_;
  return run;
}

// Two ranks in two threads over a store communicator; both get the same directive script.
inline RunRecord TrainTwoRanks(const TrainConfig& config, int64_t stop_step = 0,
                               Directive stop = Directive::kContinue) {
  StoreOptions options;
  options.timeout = std::chrono::seconds(60);
  std::unique_ptr<Communicator> rank0 = CreateStoreCommunicator(0, 2, options);
  options.port = StorePort(*rank0);
  std::unique_ptr<Communicator> rank1 = CreateStoreCommunicator(1, 2, options);
  RecordingSink sink0, sink1;
  DirectiveAt directives0(stop_step > 0 ? stop_step : INT64_MAX, stop);
  DirectiveAt directives1(stop_step > 0 ? stop_step : INT64_MAX, stop);
  Trainer trainer0(config, {rank0.get(), &sink0, &directives0});
  Trainer trainer1(config, {rank1.get(), &sink1, &directives1});
  absl::StatusOr<TrainResult> result1 = absl::UnknownError("not run");
  std::thread other([&] { result1 = trainer1.Run(); });
  RunRecord run = Record(trainer0, trainer0.Run());
  other.join();
  // Rank 1 must succeed whenever rank 0 does (a failure on both is the caller's to check).
  if (run.result.ok()) {
    EXPECT_TRUE(result1.ok()) << "rank 1: " << result1.status();
  }
  if (result1.ok() && run.result.ok()) {
    EXPECT_EQ(trainer1.step_losses(), trainer0.step_losses()) << "the ranks disagree";
  }
  run.progress = sink0.progress_;
  return run;
}

// |a - b| <= tolerance * |b| for every step of `expected` in [from, to].
inline void ExpectLossesMatch(const std::map<int64_t, double>& actual,
                              const std::map<int64_t, double>& expected, int64_t from, int64_t to,
                              double tolerance) {
  for (int64_t step = from; step <= to; ++step) {
    ASSERT_TRUE(actual.contains(step)) << "no loss for step " << step;
    ASSERT_TRUE(expected.contains(step)) << "no reference loss for step " << step;
    EXPECT_LE(std::abs(actual.at(step) - expected.at(step)),
              tolerance * std::abs(expected.at(step)))
        << "step " << step << ": " << actual.at(step) << " vs " << expected.at(step);
  }
}

}  // namespace flame::worker::testing
