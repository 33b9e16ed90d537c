// Tokenization off the training thread: a background thread runs a TextBatchLoader ahead of the
// trainer and hands over finished batches through a small queue.
//
// Resumption stays exact: every batch travels with the loader position *after* it, and
// Position() answers the position after the last batch the trainer took, not after the batches
// still waiting in the queue. training.num_workers = 0 keeps everything on the training thread
// (PyTorch DataLoader's meaning); >= 1 uses this class with one background thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "worker/data/text_batch_loader.h"

namespace flame::worker {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual absl::StatusOr<Batch> Next() = 0;
  // The position after the last batch Next returned.
  virtual DataPosition Position() const = 0;
  virtual absl::Status Restore(const DataPosition& position) = 0;
};

// The loader itself, on the caller's thread.
class DirectBatchSource final : public BatchSource {
 public:
  explicit DirectBatchSource(std::unique_ptr<TextBatchLoader> loader)
      : loader_(std::move(loader)) {}
  absl::StatusOr<Batch> Next() override { return loader_->Next(); }
  DataPosition Position() const override { return loader_->Position(); }
  absl::Status Restore(const DataPosition& p) override { return loader_->Restore(p); }

 private:
  std::unique_ptr<TextBatchLoader> loader_;
};

class PrefetchingBatchSource final : public BatchSource {
 public:
  // Keeps up to `depth` batches ready. The thread starts with the first Next().
  PrefetchingBatchSource(std::unique_ptr<TextBatchLoader> loader, size_t depth);
  ~PrefetchingBatchSource() override;

  absl::StatusOr<Batch> Next() override;
  DataPosition Position() const override;
  // Stops the thread, drops prefetched batches, restores the loader.
  absl::Status Restore(const DataPosition& position) override;

 private:
  struct Ready {
    absl::StatusOr<Batch> batch;
    DataPosition after;
  };
  void Produce();
  void Stop();

  std::unique_ptr<TextBatchLoader> loader_;  // used by the thread while it runs
  const size_t depth_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Ready> queue_;       // guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_
  bool producer_failed_ = false;  // guarded by mutex_: the thread ended on an error
  absl::Status last_error_;       // guarded by mutex_
  DataPosition consumed_;         // guarded by mutex_
  std::thread thread_;
};

}  // namespace flame::worker
