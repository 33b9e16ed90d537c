// Rotary embedding: the CPU reference's properties (position 0 is the identity, the backward
// undoes the forward, finite differences), then the GPU kernels against it, dense and packed.
#include "kernels/rotary/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/rotary/rotary_reference.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RelRmsWithin;
using testing::ToDevice;
using testing::ToDeviceBf16;
using testing::ToHost;

TEST(RotaryReference, PositionsRestartAtEverySequenceStart) {
  const int heads = 2, dim = 16;
  const std::vector<int32_t> cu = {0, 3, 4, 9};
  auto x = RandomBf16(9 * heads * dim, -1, 1, 1);
  std::vector<float> y(x.size());
  RotaryReference(x.data(), 9, heads, dim, dim, 0, cu.data(), 3, 0, 10000.0f, false, y.data());
  for (int t : {0, 3, 4}) {  // position 0: no rotation
    for (int i = 0; i < heads * dim; ++i) EXPECT_EQ(y[t * heads * dim + i], x[t * heads * dim + i]);
  }
  // Token 6 is at position 2 of the third sequence: pair i rotates by 2 * base^(-2i/dim).
  const int i = 1, half = dim / 2;
  const double theta = 2.0 * std::pow(10000.0, -2.0 * i / dim);
  const float* xr = &x[6 * heads * dim];
  EXPECT_NEAR(y[6 * heads * dim + i], xr[i] * std::cos(theta) - xr[i + half] * std::sin(theta), 1e-5);
}

TEST(RotaryReference, BackwardUndoesForwardAndMatchesFiniteDifferences) {
  const int tokens = 5, heads = 2, dim = 16, rot = 8;
  auto x = RandomBf16(tokens * heads * dim, -1, 1, 2), dy = RandomBf16(x.size(), -1, 1, 3);
  std::vector<float> y(x.size()), back(x.size()), dx(x.size());
  RotaryReference(x.data(), tokens, heads, dim, rot, tokens, nullptr, 0, 7, 500.0f, false, y.data());
  RotaryReference(y.data(), tokens, heads, dim, rot, tokens, nullptr, 0, 7, 500.0f, true, back.data());
  EXPECT_TRUE(RelRmsWithin("inverse(forward(x))", back, x, 1e-6));
  auto loss = [&] {
    RotaryReference(x.data(), tokens, heads, dim, rot, tokens, nullptr, 0, 7, 500.0f, false, y.data());
    return testing::Dot(y, dy);
  };
  RotaryReference(dy.data(), tokens, heads, dim, rot, tokens, nullptr, 0, 7, 500.0f, true, dx.data());
  EXPECT_TRUE(RelRmsWithin("dx", testing::FiniteDifferenceGradient(x, loss, 1e-2f), dx, 1e-4));
}

struct GpuCase {
  int tokens;
  int heads;
  int head_dim;
  int rotary_dim;
  int seq_len;                  // dense when cu is empty
  std::vector<int32_t> cu;      // packed sequences
  bool in_place;
};

void RunGpuCase(const GpuCase& c) {
  const size_t n = static_cast<size_t>(c.tokens) * c.heads * c.head_dim;
  auto x = RandomBf16(n, -2, 2, 21), dy = RandomBf16(n, -1, 1, 22);
  const int num_seqs = static_cast<int>(c.cu.size()) - 1;
  const int32_t* cu_host = c.cu.empty() ? nullptr : c.cu.data();
  std::vector<float> y_ref(n), dx_ref(n);
  RotaryReference(x.data(), c.tokens, c.heads, c.head_dim, c.rotary_dim, c.seq_len, cu_host,
                  num_seqs, 0, 10000.0f, false, y_ref.data());
  RotaryReference(dy.data(), c.tokens, c.heads, c.head_dim, c.rotary_dim, c.seq_len, cu_host,
                  num_seqs, 0, 10000.0f, true, dx_ref.data());
  auto d_x = ToDeviceBf16(x), d_dy = ToDeviceBf16(dy);
  auto d_cu = ToDevice(c.cu.empty() ? std::vector<int32_t>{0} : c.cu);
  DeviceBuffer<__nv_bfloat16> d_y(n), d_dx(n);
  FLAME_ASSERT_CUDA(d_y.Poison());
  FLAME_ASSERT_CUDA(d_dx.Poison());
  RotaryParams p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.head_dim;
  p.rotary_dim = c.rotary_dim;
  p.seq_len = c.seq_len;
  if (!c.cu.empty()) p.cu_seqlens = d_cu->get(), p.num_seqs = num_seqs;
  p.x = d_x->get();
  p.y = c.in_place ? d_x->get() : d_y.get();
  FLAME_ASSERT_CUDA(RotaryForward(p, nullptr));
  p.x = d_dy->get();
  p.y = c.in_place ? d_dy->get() : d_dx.get();
  FLAME_ASSERT_CUDA(RotaryBackward(p, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("y", ToHost(c.in_place ? *d_x : d_y), y_ref, 5e-3));
  EXPECT_TRUE(RelRmsWithin("dx", ToHost(c.in_place ? *d_dy : d_dx), dx_ref, 5e-3));
}

TEST(RotaryGpu, DenseBatchesMatchReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({2 * 300, 4, 128, 128, 300, {}, false});
  RunGpuCase({8192, 2, 64, 64, 8192, {}, true});  // long positions, in place
}

TEST(RotaryGpu, PackedSequencesRestartPositionsAndPartialRotaryDimPassesThrough) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({600, 3, 64, 32, 0, {0, 5, 133, 134, 600}, false});
  RunGpuCase({1001, 16, 256, 256, 0, {0, 1, 64, 65, 999, 1001}, true});
}

}  // namespace
}  // namespace flame::kernels
