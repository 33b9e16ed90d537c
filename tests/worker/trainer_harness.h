// Running Trainers in tests without a coordinator: recording sinks, scripted directives, and one-
// and two-rank runs that return what a test compares (result, per-step losses, weights).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
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

// Two ranks of one config in two threads over a store communicator, both with the same directive
// script (continue until stop_step, then `stop`; stop_step 0: always continue). Runs in the
// constructor and keeps the trainers, so that a test can look at either rank's model and losses.
class TwoRankRun {
 public:
  explicit TwoRankRun(const TrainConfig& config, int64_t stop_step = 0,
                      Directive stop = Directive::kContinue)
      : directives_{DirectiveAt(stop_step > 0 ? stop_step : INT64_MAX, stop),
                    DirectiveAt(stop_step > 0 ? stop_step : INT64_MAX, stop)} {
    StoreOptions options;
    options.timeout = std::chrono::seconds(60);
    communicators_[0] = CreateStoreCommunicator(0, 2, options);
    options.port = StorePort(*communicators_[0]);
    communicators_[1] = CreateStoreCommunicator(1, 2, options);
    for (int rank : {0, 1}) {
      trainers_[rank] = std::make_unique<Trainer>(
          config, TrainerContext{communicators_[rank].get(), &sinks_[rank], &directives_[rank]});
    }
    std::thread other([this] { results_[1] = trainers_[1]->Run(); });
    results_[0] = trainers_[0]->Run();
    other.join();
  }

  Trainer& trainer(int rank) { return *trainers_[rank]; }
  const RecordingSink& sink(int rank) const { return sinks_[rank]; }
  const absl::StatusOr<TrainResult>& result(int rank) const { return results_[rank]; }

 private:
  std::unique_ptr<Communicator> communicators_[2];
  RecordingSink sinks_[2];
  DirectiveAt directives_[2];
  std::unique_ptr<Trainer> trainers_[2];
  absl::StatusOr<TrainResult> results_[2] = {absl::UnknownError("not run"),
                                             absl::UnknownError("not run")};
};

// A TwoRankRun as rank 0's record, checking that rank 1 agrees with it.
inline RunRecord TrainTwoRanks(const TrainConfig& config, int64_t stop_step = 0,
                               Directive stop = Directive::kContinue) {
  TwoRankRun ranks(config, stop_step, stop);
  RunRecord run = Record(ranks.trainer(0), ranks.result(0));
  // Rank 1 must succeed whenever rank 0 does (a failure on both is the caller's to check).
  if (run.result.ok()) {
    EXPECT_TRUE(ranks.result(1).ok()) << "rank 1: " << ranks.result(1).status();
  }
  if (ranks.result(1).ok() && run.result.ok()) {
    EXPECT_EQ(ranks.trainer(1).step_losses(), ranks.trainer(0).step_losses())
        << "the ranks disagree";
  }
  run.progress = ranks.sink(0).progress_;
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
