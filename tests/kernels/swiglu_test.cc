// SwiGLU: the CPU reference against finite differences, then the GPU kernels against it.
#include "kernels/activations/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/activations/swiglu_reference.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RelRmsWithin;
using testing::ToDeviceBf16;
using testing::ToHost;

TEST(SwiGluReference, ForwardIsSwishOfGateTimesUp) {
  const std::vector<float> gate = {-3.0f, -0.5f, 0.0f, 0.5f, 4.0f};
  const std::vector<float> up = {1.0f, 2.0f, -1.0f, 3.0f, -0.25f};
  std::vector<float> y(5);
  SwiGluForwardReference(gate.data(), up.data(), 5, y.data());
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(y[i], gate[i] / (1 + std::exp(-gate[i])) * up[i], 1e-6) << i;
  }
}

TEST(SwiGluReference, BackwardMatchesFiniteDifferences) {
  const int n = 64;
  auto gate = RandomBf16(n, -6, 6, 1), up = RandomBf16(n, -2, 2, 2), dy = RandomBf16(n, -1, 1, 3);
  std::vector<float> y(n), dgate(n), dup(n);
  auto loss = [&] {
    SwiGluForwardReference(gate.data(), up.data(), n, y.data());
    return testing::Dot(y, dy);
  };
  SwiGluBackwardReference(gate.data(), up.data(), dy.data(), n, dgate.data(), dup.data());
  EXPECT_TRUE(RelRmsWithin("dgate", testing::FiniteDifferenceGradient(gate, loss, 1e-3f), dgate, 1e-3));
  EXPECT_TRUE(RelRmsWithin("dup", testing::FiniteDifferenceGradient(up, loss, 1e-3f), dup, 1e-3));
}

// gate and up are the two halves of one fused projection: (rows, 2 * dim), row stride 2 * dim.
void RunGpuCase(int rows, int dim) {
  const size_t n = static_cast<size_t>(rows) * dim;
  auto fused = RandomBf16(2 * n, -5, 5, 11), dy = RandomBf16(n, -1, 1, 12);
  std::vector<float> gate(n), up(n);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i) {
      gate[size_t(r) * dim + i] = fused[size_t(r) * 2 * dim + i];
      up[size_t(r) * dim + i] = fused[size_t(r) * 2 * dim + dim + i];
    }
  }
  std::vector<float> y_ref(n), dg_ref(n), du_ref(n);
  SwiGluForwardReference(gate.data(), up.data(), n, y_ref.data());
  SwiGluBackwardReference(gate.data(), up.data(), dy.data(), n, dg_ref.data(), du_ref.data());
  auto d_fused = ToDeviceBf16(fused), d_dy = ToDeviceBf16(dy);
  DeviceBuffer<__nv_bfloat16> d_y(n), d_y2(n), d_dg(n), d_du(n);
  for (auto* b : {&d_y, &d_y2, &d_dg, &d_du}) FLAME_ASSERT_CUDA(b->Poison());
  SwiGluForwardParams f;
  f.gate = d_fused->get();
  f.up = d_fused->get() + dim;
  f.gate_stride = f.up_stride = 2 * dim;
  f.y = d_y.get();
  f.rows = rows;
  f.dim = dim;
  FLAME_ASSERT_CUDA(SwiGluForward(f, nullptr));
  SwiGluBackwardParams b;
  b.gate = f.gate;
  b.up = f.up;
  b.gate_stride = b.up_stride = 2 * dim;
  b.dy = d_dy->get();
  b.dgate = d_dg.get();
  b.dup = d_du.get();
  b.y = d_y2.get();
  b.rows = rows;
  b.dim = dim;
  FLAME_ASSERT_CUDA(SwiGluBackward(b, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("y", ToHost(d_y), y_ref, 5e-3));
  EXPECT_TRUE(RelRmsWithin("y (recomputed)", ToHost(d_y2), y_ref, 5e-3));
  EXPECT_TRUE(RelRmsWithin("dgate", ToHost(d_dg), dg_ref, 5e-3));
  EXPECT_TRUE(RelRmsWithin("dup", ToHost(d_du), du_ref, 5e-3));
}

TEST(SwiGluGpu, MatchesReferenceOnFusedProjectionHalves) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase(1000, 2816);  // hidden 1024 -> intermediate 2816
  RunGpuCase(77, 5632);
  RunGpuCase(3, 8);
}

}  // namespace
}  // namespace flame::kernels
