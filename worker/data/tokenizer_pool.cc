#include "worker/data/tokenizer_pool.h"

#include "worker/data/document_source.h"

namespace flame::worker {

TokenizerPool::TokenizerPool(const Tokenizer& tokenizer, int threads) : tokenizer_(tokenizer) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

TokenizerPool::~TokenizerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

int64_t TokenizerPool::Submit(std::vector<std::string> texts) {
  std::lock_guard<std::mutex> lock(mutex_);
  queued_.push_back({submitted_, std::move(texts)});
  changed_.notify_all();
  return submitted_++;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizerPool::Take(int64_t job) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_.count(job) > 0; });
  absl::StatusOr<std::vector<std::vector<int32_t>>> result = std::move(done_.at(job));
  done_.erase(job);
  return result;
}

void TokenizerPool::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return closing_ || !queued_.empty(); });
      if (queued_.empty()) return;  // closing, and nothing left to do
      job = std::move(queued_.front());
      queued_.pop_front();
    }
    absl::StatusOr<std::vector<std::vector<int32_t>>> result = std::vector<std::vector<int32_t>>{};
    for (const std::string& text : job.texts) {
      absl::StatusOr<std::vector<int32_t>> ids = EncodeDocument(tokenizer_, text);
      if (!ids.ok()) {
        result = ids.status();
        break;
      }
      result->push_back(*std::move(ids));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_.emplace(job.number, std::move(result));
    changed_.notify_all();
  }
}

}  // namespace flame::worker
