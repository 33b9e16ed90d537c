// Tokenizer threads: texts go in as numbered jobs, ids come back in any order the caller asks.
//
// Used by the data loader (training.num_workers threads tokenize a rank's next documents while
// the trainer computes) and by flame-tokenize (--workers). Tokenizer::Encode is const and
// thread-safe, so the threads share one tokenizer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace flame::worker {

class TokenizerPool {
 public:
  TokenizerPool(const Tokenizer& tokenizer, int threads);
  ~TokenizerPool();  // finishes queued jobs, then joins
  TokenizerPool(const TokenizerPool&) = delete;
  TokenizerPool& operator=(const TokenizerPool&) = delete;

  // Queues EncodeDocument of every text; returns the job's number (0, 1, 2, ...).
  int64_t Submit(std::vector<std::string> texts);
  // Waits for job `job` and returns its documents' ids, in the order of its texts.
  absl::StatusOr<std::vector<std::vector<int32_t>>> Take(int64_t job);

 private:
  struct Job {
    int64_t number = 0;
    std::vector<std::string> texts;
  };
  void Work();

  const Tokenizer& tokenizer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queued_;                                                     // guarded by mutex_
  std::map<int64_t, absl::StatusOr<std::vector<std::vector<int32_t>>>> done_;  // guarded
  int64_t submitted_ = 0;                                                      // guarded by mutex_
  bool closing_ = false;                                                       // guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace flame::worker
