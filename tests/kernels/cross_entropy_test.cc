// Cross-entropy and fused linear cross-entropy: the CPU references against the definition and
// finite differences, then the GPU kernels against the references.
#include "kernels/cross_entropy/cross_entropy.h"

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cross_entropy/cross_entropy_reference.h"
#include "kernels/cross_entropy/linear_cross_entropy.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RandomNormal;
using testing::RelRmsWithin;
using testing::ToDevice;
using testing::ToDeviceBf16;
using testing::ToHost;

// Labels in [0, vocab), with about `ignored` of them set to ignore_index.
std::vector<int64_t> RandomLabels(int64_t rows, int vocab, double ignored, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> label(0, vocab - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> labels(rows);
  for (auto& l : labels) l = u(rng) < ignored ? kIgnoreIndex : label(rng);
  return labels;
}

TEST(CrossEntropyReference, LossIsTheMeanNegativeLogSoftmaxOverValidRows) {
  const int rows = 4, vocab = 5;
  auto logits = RandomBf16(rows * vocab, -3, 3, 1);
  const std::vector<int64_t> labels = {2, kIgnoreIndex, 0, 4};
  std::vector<float> dlogits(logits.size()), lse(rows);
  const float loss = CrossEntropyReference(logits.data(), labels.data(), rows, vocab, kIgnoreIndex,
                                           dlogits.data(), lse.data());
  double want = 0;
  for (int r : {0, 2, 3}) {
    double z = 0;
    for (int j = 0; j < vocab; ++j) z += std::exp(double(logits[r * vocab + j]));
    want += -std::log(std::exp(double(logits[r * vocab + labels[r]])) / z);
    EXPECT_NEAR(lse[r], std::log(z), 1e-6);
  }
  EXPECT_NEAR(loss, want / 3, 1e-6);
  for (int j = 0; j < vocab; ++j) EXPECT_EQ(dlogits[1 * vocab + j], 0.0f);
}

TEST(CrossEntropyReference, GradientMatchesFiniteDifferences) {
  const int rows = 5, vocab = 7;
  auto logits = RandomBf16(rows * vocab, -3, 3, 2);
  const std::vector<int64_t> labels = {6, 0, kIgnoreIndex, 3, 3};
  std::vector<float> dlogits(logits.size()), scratch(logits.size());
  auto loss = [&] {
    return double(CrossEntropyReference(logits.data(), labels.data(), rows, vocab, kIgnoreIndex,
                                        scratch.data(), nullptr));
  };
  CrossEntropyReference(logits.data(), labels.data(), rows, vocab, kIgnoreIndex, dlogits.data(),
                        nullptr);
  EXPECT_TRUE(RelRmsWithin("dlogits", testing::FiniteDifferenceGradient(logits, loss, 1e-2f),
                           dlogits, 2e-3));
}

TEST(LinearCrossEntropyReference, GradientsMatchFiniteDifferences) {
  const int rows = 6, dim = 5, vocab = 7;
  auto hidden = RandomBf16(rows * dim, -1, 1, 3), weight = RandomBf16(vocab * dim, -1, 1, 4);
  const std::vector<int64_t> labels = {1, 6, kIgnoreIndex, 0, 2, 2};
  std::vector<float> dh(hidden.size()), dw(weight.size()), sh(hidden.size()), sw(weight.size());
  auto loss = [&] {
    return double(LinearCrossEntropyReference(hidden.data(), weight.data(), labels.data(), rows,
                                              dim, vocab, kIgnoreIndex, sh.data(), sw.data()));
  };
  LinearCrossEntropyReference(hidden.data(), weight.data(), labels.data(), rows, dim, vocab,
                              kIgnoreIndex, dh.data(), dw.data());
  EXPECT_TRUE(RelRmsWithin("dhidden", testing::FiniteDifferenceGradient(hidden, loss, 1e-2f), dh, 2e-3));
  EXPECT_TRUE(RelRmsWithin("dweight", testing::FiniteDifferenceGradient(weight, loss, 1e-2f), dw, 2e-3));
}

void RunCrossEntropyGpu(int rows, int vocab, double ignored) {
  const size_t n = static_cast<size_t>(rows) * vocab;
  auto logits = RandomNormal(n, 3.0f, 11);
  auto labels = RandomLabels(rows, vocab, ignored, 12);
  std::vector<float> dlogits_ref(n), lse_ref(rows);
  const float loss_ref = CrossEntropyReference(logits.data(), labels.data(), rows, vocab,
                                               kIgnoreIndex, dlogits_ref.data(), lse_ref.data());
  auto d_logits = ToDeviceBf16(logits);
  auto d_labels = ToDevice(labels);
  DeviceBuffer<float> d_loss(1), d_lse(rows);
  DeviceBuffer<char> d_ws(CrossEntropyWorkspaceBytes(rows));
  FLAME_ASSERT_CUDA(d_loss.Poison());
  FLAME_ASSERT_CUDA(d_lse.Poison());
  FLAME_ASSERT_CUDA(d_ws.Poison());
  CrossEntropyParams p;
  p.logits = d_logits->get();
  p.labels = d_labels->get();
  p.loss = d_loss.get();
  p.lse = d_lse.get();
  p.workspace = d_ws.get();
  p.rows = rows;
  p.vocab = vocab;
  FLAME_ASSERT_CUDA(CrossEntropyForwardBackward(p, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto loss = ToHost(d_loss);
  if (ignored >= 1.0) {
    EXPECT_EQ(loss[0], 0.0f);
  } else {
    EXPECT_NEAR(loss[0], loss_ref, 1e-5 * std::fabs(loss_ref)) << rows << "x" << vocab;
  }
  EXPECT_TRUE(RelRmsWithin("lse", ToHost(d_lse), lse_ref, 5e-6)) << rows << "x" << vocab;
  const auto dlogits = ToHost(*d_logits);
  if (ignored < 1.0) {
    EXPECT_TRUE(RelRmsWithin("dlogits", dlogits, dlogits_ref, 5e-3)) << rows << "x" << vocab;
  }
  for (int r = 0; r < rows; ++r) {
    if (labels[r] != kIgnoreIndex) continue;
    for (int j = 0; j < vocab; ++j) ASSERT_EQ(dlogits[size_t(r) * vocab + j], 0.0f) << r << "," << j;
  }
}

TEST(CrossEntropyGpu, MatchesReferenceAndZeroesIgnoredRows) {
  FLAME_SKIP_WITHOUT_GPU();
  RunCrossEntropyGpu(300, 32000, 0.2);  // the row fits in registers: one read, one write
  RunCrossEntropyGpu(37, 50304, 0.1);   // two tiles: the row is read again
  RunCrossEntropyGpu(100, 128, 0.5);
}

TEST(CrossEntropyGpu, AllRowsIgnoredGivesZeroLossAndGradient) {
  FLAME_SKIP_WITHOUT_GPU();
  RunCrossEntropyGpu(20, 1024, 1.0);
}

void RunLinearCrossEntropyGpu(int rows, int dim, int vocab, int chunk_rows) {
  auto hidden = RandomNormal(size_t(rows) * dim, 1.0f, 21);
  auto weight = RandomNormal(size_t(vocab) * dim, 0.05f, 22);
  auto labels = RandomLabels(rows, vocab, 0.15, 23);
  std::vector<float> dh_ref(hidden.size()), dw_ref(weight.size());
  const float loss_ref = LinearCrossEntropyReference(hidden.data(), weight.data(), labels.data(),
                                                     rows, dim, vocab, kIgnoreIndex, dh_ref.data(),
                                                     dw_ref.data());
  auto d_h = ToDeviceBf16(hidden), d_w = ToDeviceBf16(weight);
  auto d_labels = ToDevice(labels);
  DeviceBuffer<float> d_loss(1), d_dw(weight.size());
  DeviceBuffer<__nv_bfloat16> d_dh(hidden.size());
  const int chunk = chunk_rows ? chunk_rows : LinearCrossEntropyDefaultChunk(rows, dim, vocab);
  DeviceBuffer<char> d_ws(LinearCrossEntropyWorkspaceBytes(rows, vocab, chunk));
  for (auto* b : {&d_loss, &d_dw}) FLAME_ASSERT_CUDA(b->Poison());
  FLAME_ASSERT_CUDA(d_dh.Poison());
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  LinearCrossEntropyParams p;
  p.hidden = d_h->get();
  p.weight = d_w->get();
  p.labels = d_labels->get();
  p.loss = d_loss.get();
  p.dhidden = d_dh.get();
  p.dweight = d_dw.get();
  p.workspace = d_ws.get();
  p.cublas = handle;
  p.rows = rows;
  p.dim = dim;
  p.vocab = vocab;
  p.chunk_rows = chunk_rows;
  const cudaError_t err = LinearCrossEntropyForwardBackward(p, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  cublasDestroy(handle);
  FLAME_ASSERT_CUDA(err);
  FLAME_ASSERT_CUDA(sync);
  // The chunk logits are bf16 (as in fla), so allow for their rounding.
  EXPECT_NEAR(ToHost(d_loss)[0], loss_ref, 2e-3 * loss_ref) << rows << "x" << dim << "x" << vocab;
  EXPECT_TRUE(RelRmsWithin("dhidden", ToHost(d_dh), dh_ref, 1e-2));
  EXPECT_TRUE(RelRmsWithin("dweight", ToHost(d_dw), dw_ref, 1e-2));
}

TEST(LinearCrossEntropyGpu, ChunkedMatchesReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunLinearCrossEntropyGpu(700, 256, 4000, 128);  // 6 chunks, the last partial
  RunLinearCrossEntropyGpu(513, 128, 2048, 0);    // fla's default chunking
}

}  // namespace
}  // namespace flame::kernels
