// Held-out evaluation (metrics.eval_interval, eval_dataset, eval_steps): flame has none.
//
// Every evaluation reads the same eval_steps batches: the held-out files tokenized and packed
// exactly like the training data (same tokenizer, batch_size, seq_len, varlen), each rank its
// share of the documents (document i belongs to rank i % world_size), and the reader restarts
// from the beginning each time. So two evaluations of the same weights give the same loss, and a
// falling eval loss means the model improved, not that it saw easier text.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/config/train_config.h"
#include "worker/data/text_batch_loader.h"
#include "worker/data/tokenizer.h"
#include "worker/model/causal_lm.h"

namespace flame::worker {

class Evaluator {
 public:
  // Opens metrics.eval_dataset (errors name the key).
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const TrainConfig& config,
                                                           const Tokenizer* tokenizer, int64_t rank,
                                                           int64_t world_size);

  // This rank's mean loss over its eval_steps batches, without gradients, with the model in
  // eval mode (and back in train mode afterwards). Every rank has the same number of batches of
  // the same shape, so the mean of the ranks' results is the mean over all evaluated tokens.
  absl::StatusOr<double> LocalLoss(model::CausalLm& model);

  int64_t batches() const { return batches_; }

 private:
  Evaluator(std::unique_ptr<TextBatchLoader> loader, DataPosition start, int64_t batches)
      : loader_(std::move(loader)), start_(std::move(start)), batches_(batches) {}

  std::unique_ptr<TextBatchLoader> loader_;
  DataPosition start_;  // the reader's position before the first batch
  int64_t batches_;
};

}  // namespace flame::worker
