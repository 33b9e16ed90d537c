#include "worker/metrics/evaluator.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

// Switches a module to eval mode for a scope and back to what it was.
class EvalModeScope {
 public:
  explicit EvalModeScope(torch::nn::Module& module)
      : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeScope() { module_.train(was_training_); }

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const TrainConfig& config,
                                                             const Tokenizer* tokenizer,
                                                             int64_t rank, int64_t world_size) {
  LoaderOptions options;
  options.sources = config.metrics.eval_dataset;
  // Several held-out files are mixed evenly; the draw is seeded, so every evaluation sees the
  // same batches.
  if (options.sources.size() > 1) options.probs.assign(options.sources.size(), 1.0);
  options.seed = static_cast<uint64_t>(config.training.seed);
  options.batch_size = config.training.batch_size;
  options.seq_len = config.training.seq_len;
  options.rank = rank;
  options.world_size = world_size;
  options.varlen = config.training.varlen;
  options.context_len = config.training.context_len;
  absl::StatusOr<std::unique_ptr<TextBatchLoader>> loader =
      TextBatchLoader::Create(options, tokenizer);
  if (!loader.ok()) {
    return absl::Status(loader.status().code(),
                        absl::StrCat("metrics.eval_dataset: ", loader.status().message()));
  }
  DataPosition start = (*loader)->Position();
  return std::unique_ptr<Evaluator>(
      new Evaluator(*std::move(loader), std::move(start), config.metrics.eval_steps));
}

absl::StatusOr<double> Evaluator::LocalLoss(model::CausalLm& model) {
  FLAME_RETURN_IF_ERROR(loader_->Restore(start_));
  torch::NoGradGuard no_grad;
  EvalModeScope eval_mode(model);
  const torch::Device device = model.parameters().front().device();
  double loss_sum = 0;
  for (int64_t i = 0; i < batches_; ++i) {
    absl::StatusOr<Batch> batch = loader_->Next();
    if (!batch.ok()) {
      return absl::Status(batch.status().code(),
                          absl::StrCat("metrics.eval_dataset: ", batch.status().message()));
    }
    const torch::Tensor ids =
        torch::from_blob(batch->ids.data(), {batch->batch_size, batch->seq_len}, torch::kInt32)
            .to(device, torch::kInt64);  // [B, T]; labels are the same ids
    torch::Tensor cu_seqlens;
    if (!batch->cu_seqlens.empty()) {
      cu_seqlens = torch::tensor(batch->cu_seqlens, torch::kInt64).to(device);  // [N + 1]
    }
    loss_sum += model.Forward(ids, ids, cu_seqlens).loss.item<double>();
  }
  return loss_sum / static_cast<double>(batches_);
}

}  // namespace flame::worker
