// Checks any CausalLm must pass, shared by the model tests of each family: packed (varlen) rows
// behave like separate sequences, and no position sees the future. Both run in float64.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/model/causal_lm.h"

namespace flame::worker::model::testing {

inline double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

inline std::map<std::string, std::vector<int64_t>> ParameterShapes(const CausalLm& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model.named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

// A packed row [1, ΣT] with cu_seqlens gives, position for position, the logits of each sequence
// run alone (within 1e-10 in float64), and differs from the same row run without cu_seqlens.
inline void ExpectPackedRowMatchesSeparateSequences(CausalLm& model, int64_t vocab,
                                                    const std::vector<int64_t>& bounds) {
  model.to(torch::kDouble);
  torch::NoGradGuard no_grad;
  const int64_t T = bounds.back();
  const torch::Tensor ids = torch::randint(0, vocab, {1, T}, torch::kLong);
  const torch::Tensor packed =
      model.Forward(ids, {}, torch::tensor(bounds, torch::kLong)).logits;  // [1, T, V]
  ASSERT_EQ(packed.scalar_type(), torch::kDouble);
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    const int64_t begin = bounds[n], length = bounds[n + 1] - bounds[n];
    const torch::Tensor alone = model.Forward(ids.narrow(1, begin, length), {}).logits;
    EXPECT_LT(MaxDifference(packed.narrow(1, begin, length), alone), 1e-10) << "sequence " << n;
  }
  // Without cu_seqlens the later sequences see the earlier ones.
  const int64_t last = bounds[bounds.size() - 2];
  EXPECT_GT(MaxDifference(model.Forward(ids, {}).logits.narrow(1, last, T - last),
                          packed.narrow(1, last, T - last)),
            1e-6);
}

// Changing the tokens after position t leaves the logits at positions <= t unchanged.
inline void ExpectCausal(CausalLm& model, int64_t vocab, int64_t T, int64_t t) {
  model.to(torch::kDouble);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, vocab, {2, T}, torch::kLong);
  torch::Tensor changed = ids.clone();
  changed.narrow(1, t + 1, T - t - 1).copy_(torch::randint(0, vocab, {2, T - t - 1}, torch::kLong));
  const torch::Tensor a = model.Forward(ids, {}).logits, b = model.Forward(changed, {}).logits;
  EXPECT_LT(MaxDifference(a.narrow(1, 0, t + 1), b.narrow(1, 0, t + 1)), 1e-12);
  EXPECT_GT(MaxDifference(a.narrow(1, t + 1, T - t - 1), b.narrow(1, t + 1, T - t - 1)), 1e-6);
}

}  // namespace flame::worker::model::testing
