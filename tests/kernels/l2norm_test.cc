// L2 norm: the CPU reference against its definition and finite differences, then the GPU
// kernels against the reference.
#include "kernels/l2norm/l2norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/l2norm/l2norm_reference.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RelRmsWithin;
using testing::ToDeviceBf16;
using testing::ToHost;

constexpr float kEps = 1e-6f;

TEST(L2NormReference, RowsComeOutWithUnitNormAndTheSameDirection) {
  const int rows = 4, dim = 32;
  auto x = RandomBf16(rows * dim, -3, 3, 1);
  std::vector<float> y(rows * dim);
  L2NormForwardReference(x.data(), rows, dim, kEps, y.data());
  for (int r = 0; r < rows; ++r) {
    double norm2 = 0, xnorm2 = 0;
    for (int i = 0; i < dim; ++i) norm2 += y[r * dim + i] * y[r * dim + i];
    for (int i = 0; i < dim; ++i) xnorm2 += x[r * dim + i] * x[r * dim + i];
    EXPECT_NEAR(norm2, xnorm2 / (xnorm2 + kEps), 1e-6);
    for (int i = 0; i < dim; ++i) {
      EXPECT_NEAR(y[r * dim + i], x[r * dim + i] / std::sqrt(xnorm2 + kEps), 1e-6);
    }
  }
}

TEST(L2NormReference, BackwardMatchesFiniteDifferences) {
  const int rows = 3, dim = 16;
  auto x = RandomBf16(rows * dim, -2, 2, 2), dy = RandomBf16(rows * dim, -1, 1, 3);
  std::vector<float> y(rows * dim), dx(rows * dim);
  auto loss = [&] {
    L2NormForwardReference(x.data(), rows, dim, kEps, y.data());
    return testing::Dot(y, dy);
  };
  L2NormBackwardReference(x.data(), dy.data(), rows, dim, kEps, dx.data());
  EXPECT_TRUE(RelRmsWithin("dx", testing::FiniteDifferenceGradient(x, loss, 1e-3f), dx, 1e-3));
}

void RunGpuCase(int rows, int dim) {
  const size_t n = static_cast<size_t>(rows) * dim;
  auto x = RandomBf16(n, -2, 2, 11), dy = RandomBf16(n, -1, 1, 12);
  std::vector<float> y_ref(n), dx_ref(n);
  L2NormForwardReference(x.data(), rows, dim, kEps, y_ref.data());
  L2NormBackwardReference(x.data(), dy.data(), rows, dim, kEps, dx_ref.data());
  auto d_x = ToDeviceBf16(x), d_dy = ToDeviceBf16(dy);
  DeviceBuffer<__nv_bfloat16> d_y(n), d_dx(n);
  DeviceBuffer<float> d_rstd(rows);
  FLAME_ASSERT_CUDA(d_y.Poison());
  FLAME_ASSERT_CUDA(d_dx.Poison());
  FLAME_ASSERT_CUDA(d_rstd.Poison());
  L2NormForwardParams f;
  f.x = d_x->get();
  f.y = d_y.get();
  f.rstd = d_rstd.get();
  f.rows = rows;
  f.dim = dim;
  FLAME_ASSERT_CUDA(L2NormForward(f, nullptr));
  L2NormBackwardParams b;
  b.x = d_x->get();
  b.dy = d_dy->get();
  b.dx = d_dx.get();
  b.rows = rows;
  b.dim = dim;
  FLAME_ASSERT_CUDA(L2NormBackward(b, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("y", ToHost(d_y), y_ref, 5e-3)) << rows << "x" << dim;
  EXPECT_TRUE(RelRmsWithin("dx", ToHost(d_dx), dx_ref, 5e-3)) << rows << "x" << dim;
  const auto rstd = ToHost(d_rstd);
  for (int r = 0; r < rows; r += 97) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[size_t(r) * dim + i]) * x[size_t(r) * dim + i];
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(ss + kEps), 1e-5 * rstd[r]);
  }
}

TEST(L2NormGpu, MatchesReferenceForHeadDims) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase(2048 * 16 + 5, 128);  // q of (B*T, H) rows, K = 128
  RunGpuCase(1001, 64);
  RunGpuCase(777, 256);
  RunGpuCase(65, 1024);
  RunGpuCase(33, 8192);
}

}  // namespace
}  // namespace flame::kernels
