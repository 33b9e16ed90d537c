#include "worker/data/prefetching_loader.h"

#include <algorithm>

namespace flame::worker {

PrefetchingBatchSource::PrefetchingBatchSource(std::unique_ptr<TextBatchLoader> loader,
                                               size_t depth)
    : loader_(std::move(loader)), depth_(std::max<size_t>(1, depth)) {
  consumed_ = loader_->Position();
}

PrefetchingBatchSource::~PrefetchingBatchSource() { Stop(); }

void PrefetchingBatchSource::Produce() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || queue_.size() < depth_; });
      if (stopping_) return;
    }
    // Tokenize without the lock: this is the work the trainer must not wait for.
    Ready ready{loader_->Next(), loader_->Position()};
    // After an error the thread ends: the error reaches the trainer in order, and later calls
    // get it again (nothing can follow it).
    const bool failed = !ready.batch.ok();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(ready));
      producer_failed_ = failed;
    }
    changed_.notify_all();
    if (failed) return;
  }
}

absl::StatusOr<Batch> PrefetchingBatchSource::Next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!thread_.joinable()) thread_ = std::thread([this] { Produce(); });
  changed_.wait(lock, [this] { return !queue_.empty() || producer_failed_; });
  if (queue_.empty()) return last_error_;
  Ready ready = std::move(queue_.front());
  queue_.pop_front();
  if (ready.batch.ok()) {
    consumed_ = std::move(ready.after);
  } else {
    last_error_ = ready.batch.status();
  }
  lock.unlock();
  changed_.notify_all();
  return std::move(ready.batch);
}

DataPosition PrefetchingBatchSource::Position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_;
}

void PrefetchingBatchSource::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  producer_failed_ = false;
  queue_.clear();
}

absl::Status PrefetchingBatchSource::Restore(const DataPosition& position) {
  Stop();
  const absl::Status status = loader_->Restore(position);
  if (status.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    consumed_ = loader_->Position();
  }
  return status;
}

}  // namespace flame::worker
