// Causal short convolution: the CPU reference (no leakage across packed sequences, finite
// differences), then the GPU kernels against it for dense and packed batches, widths 1-4, with
// sequences shorter than the kernel.
#include "kernels/conv/short_conv.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/conv/short_conv_reference.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RelRmsWithin;
using testing::ToDevice;
using testing::ToDeviceBf16;
using testing::ToHost;

// Packing sequences must give exactly what running each one alone gives.
TEST(ShortConvReference, PackedSequencesMatchEachSequenceAlone) {
  const int dim = 3, width = 4;
  const std::vector<int32_t> cu = {0, 2, 7, 8, 13};
  auto x = RandomBf16(13 * dim, -1, 1, 1), w = RandomBf16(dim * width, -1, 1, 2);
  auto bias = RandomBf16(dim, -1, 1, 3);
  std::vector<float> packed(x.size());
  ShortConvForwardReference(x.data(), w.data(), bias.data(), 13, dim, width, 0, cu.data(), 4, true,
                            packed.data());
  for (int s = 0; s < 4; ++s) {
    const int len = cu[s + 1] - cu[s];
    std::vector<float> alone(len * dim);
    ShortConvForwardReference(x.data() + cu[s] * dim, w.data(), bias.data(), len, dim, width, len,
                              nullptr, 0, true, alone.data());
    for (int i = 0; i < len * dim; ++i) EXPECT_EQ(packed[cu[s] * dim + i], alone[i]) << s << "," << i;
  }
}

TEST(ShortConvReference, BackwardMatchesFiniteDifferences) {
  const int dim = 2, width = 3, tokens = 9;
  const std::vector<int32_t> cu = {0, 1, 5, 9};
  auto x = RandomBf16(tokens * dim, -1, 1, 4), w = RandomBf16(dim * width, -1, 1, 5);
  auto bias = RandomBf16(dim, -1, 1, 6), dy = RandomBf16(tokens * dim, -1, 1, 7);
  std::vector<float> y(x.size()), dx(x.size()), dw(w.size()), db(dim);
  auto loss = [&] {
    ShortConvForwardReference(x.data(), w.data(), bias.data(), tokens, dim, width, 0, cu.data(), 3,
                              true, y.data());
    return testing::Dot(y, dy);
  };
  ShortConvBackwardReference(x.data(), w.data(), bias.data(), dy.data(), tokens, dim, width, 0,
                             cu.data(), 3, true, dx.data(), dw.data(), db.data());
  EXPECT_TRUE(RelRmsWithin("dx", testing::FiniteDifferenceGradient(x, loss, 1e-2f), dx, 1e-3));
  EXPECT_TRUE(RelRmsWithin("dweight", testing::FiniteDifferenceGradient(w, loss, 1e-2f), dw, 1e-3));
  EXPECT_TRUE(RelRmsWithin("dbias", testing::FiniteDifferenceGradient(bias, loss, 1e-2f), db, 1e-3));
}

struct GpuCase {
  int tokens;
  int dim;
  int width;
  bool silu;
  bool bias;
  int seq_len;              // dense when cu is empty
  std::vector<int32_t> cu;  // packed sequences
};

void RunGpuCase(const GpuCase& c) {
  const size_t n = static_cast<size_t>(c.tokens) * c.dim;
  auto x = RandomBf16(n, -2, 2, 31), dy = RandomBf16(n, -1, 1, 32);
  auto w = RandomBf16(c.dim * c.width, -0.5, 0.5, 33), bias = RandomBf16(c.dim, -0.5, 0.5, 34);
  const int num_seqs = static_cast<int>(c.cu.size()) - 1;
  const int32_t* cu_host = c.cu.empty() ? nullptr : c.cu.data();
  const float* bias_host = c.bias ? bias.data() : nullptr;
  std::vector<float> y_ref(n), dx_ref(n), dw_ref(w.size()), db_ref(c.dim);
  ShortConvForwardReference(x.data(), w.data(), bias_host, c.tokens, c.dim, c.width, c.seq_len,
                            cu_host, num_seqs, c.silu, y_ref.data());
  ShortConvBackwardReference(x.data(), w.data(), bias_host, dy.data(), c.tokens, c.dim, c.width,
                             c.seq_len, cu_host, num_seqs, c.silu, dx_ref.data(), dw_ref.data(),
                             db_ref.data());
  auto d_x = ToDeviceBf16(x), d_dy = ToDeviceBf16(dy), d_w = ToDeviceBf16(w);
  auto d_b = ToDeviceBf16(bias);
  auto d_cu = ToDevice(c.cu.empty() ? std::vector<int32_t>{0} : c.cu);
  DeviceBuffer<__nv_bfloat16> d_y(n), d_dx(n);
  DeviceBuffer<float> d_dw(w.size()), d_db(c.dim);
  DeviceBuffer<float> d_ws(ShortConvBackwardWorkspaceBytes(c.tokens, c.dim, c.width) / 4);
  for (auto* b : {&d_y, &d_dx}) FLAME_ASSERT_CUDA(b->Poison());
  for (auto* b : {&d_dw, &d_db, &d_ws}) FLAME_ASSERT_CUDA(b->Poison());

  ShortConvForwardParams f;
  f.x = d_x->get();
  f.weight = d_w->get();
  f.bias = c.bias ? d_b->get() : nullptr;
  f.y = d_y.get();
  f.tokens = c.tokens;
  f.dim = c.dim;
  f.kernel_size = c.width;
  f.seq_len = c.seq_len;
  if (!c.cu.empty()) f.cu_seqlens = d_cu->get(), f.num_seqs = num_seqs;
  f.silu = c.silu;
  FLAME_ASSERT_CUDA(ShortConvForward(f, nullptr));
  ShortConvBackwardParams b;
  b.x = f.x;
  b.weight = f.weight;
  b.bias = f.bias;
  b.dy = d_dy->get();
  b.dx = d_dx.get();
  b.dweight = d_dw.get();
  b.dbias = c.bias ? d_db.get() : nullptr;
  b.workspace = d_ws.get();
  b.tokens = c.tokens;
  b.dim = c.dim;
  b.kernel_size = c.width;
  b.seq_len = c.seq_len;
  b.cu_seqlens = f.cu_seqlens;
  b.num_seqs = f.num_seqs;
  b.silu = c.silu;
  FLAME_ASSERT_CUDA(ShortConvBackward(b, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("y", ToHost(d_y), y_ref, 5e-3)) << c.tokens << "x" << c.dim;
  EXPECT_TRUE(RelRmsWithin("dx", ToHost(d_dx), dx_ref, 5e-3)) << c.tokens << "x" << c.dim;
  EXPECT_TRUE(RelRmsWithin("dweight", ToHost(d_dw), dw_ref, 1e-4)) << c.tokens << "x" << c.dim;
  if (c.bias) {
    EXPECT_TRUE(RelRmsWithin("dbias", ToHost(d_db), db_ref, 1e-4)) << c.tokens << "x" << c.dim;
  }
}

TEST(ShortConvGpu, DenseBatchesMatchReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({2 * 1000, 512, 4, true, false, 1000, {}});
  RunGpuCase({3 * 77, 264, 3, false, true, 77, {}});  // D not a multiple of a block's channels
}

// Lengths 1, 2 and 3 are shorter than the kernel: fla's conv backward once got these wrong.
TEST(ShortConvGpu, PackedSequencesOfOddAndTinyLengthsMatchReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({1000, 256, 4, true, true, 0, {0, 1, 3, 6, 37, 38, 300, 301, 303, 999, 1000}});
  RunGpuCase({513, 128, 2, true, false, 0, {0, 2, 255, 256, 513}});
  RunGpuCase({100, 64, 1, true, true, 0, {0, 50, 100}});
  RunGpuCase({4096, 2048, 4, true, false, 0, {0, 1, 2047, 2048, 4096}});
}

}  // namespace
}  // namespace flame::kernels
