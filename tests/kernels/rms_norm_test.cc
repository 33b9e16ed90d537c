// RMSNorm (residual add, swish gate): the CPU reference against its definition and finite
// differences, then the GPU kernels against the reference.
#include "kernels/norm/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/norm/rms_norm_reference.h"
#include "tests/kernels/small_ops_testing.h"

namespace flame::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RandomBf16;
using testing::RelRmsWithin;
using testing::ToDevice;
using testing::ToDeviceBf16;
using testing::ToHost;

constexpr float kEps = 1e-6f;

TEST(RmsNormReference, ForwardMatchesTheDefinitionElementByElement) {
  const int rows = 3, dim = 16;
  auto x = RandomBf16(rows * dim, -2, 2, 1), res = RandomBf16(rows * dim, -2, 2, 2);
  auto w = RandomBf16(dim, 0.5, 1.5, 3), g = RandomBf16(rows * dim, -4, 4, 4);
  std::vector<float> y(rows * dim), h(rows * dim), rstd(rows);
  RmsNormForwardReference(x.data(), res.data(), w.data(), g.data(), rows, dim, kEps, y.data(),
                          h.data(), rstd.data());
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int i = 0; i < dim; ++i) ms += std::pow(double(x[r * dim + i]) + res[r * dim + i], 2);
    ms /= dim;
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(ms + kEps), 1e-6 * rstd[r]);
    for (int i = 0; i < dim; ++i) {
      const double hv = double(x[r * dim + i]) + res[r * dim + i];
      const double gv = g[r * dim + i];
      const double want = hv / std::sqrt(ms + kEps) * w[i] * gv / (1 + std::exp(-gv));
      EXPECT_NEAR(h[r * dim + i], hv, 1e-6);
      EXPECT_NEAR(y[r * dim + i], want, 1e-5 * (1 + std::fabs(want))) << r << "," << i;
    }
  }
}

// loss = <y, dy> + <residual_out, dres>; the reference backward must give its gradients.
TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  const int rows = 3, dim = 24;
  auto x = RandomBf16(rows * dim, -2, 2, 11), res = RandomBf16(rows * dim, -2, 2, 12);
  auto w = RandomBf16(dim, 0.5, 1.5, 13), g = RandomBf16(rows * dim, -3, 3, 14);
  auto dy = RandomBf16(rows * dim, -1, 1, 15), dres = RandomBf16(rows * dim, -1, 1, 16);
  std::vector<float> y(rows * dim), h(rows * dim);
  auto loss = [&] {
    RmsNormForwardReference(x.data(), res.data(), w.data(), g.data(), rows, dim, kEps, y.data(),
                            h.data(), nullptr);
    return testing::Dot(y, dy) + testing::Dot(h, dres);
  };
  loss();
  std::vector<float> dx(rows * dim), dg(rows * dim), dw(dim);
  RmsNormBackwardReference(h.data(), w.data(), g.data(), dy.data(), dres.data(), rows, dim, kEps,
                           dx.data(), dg.data(), dw.data());
  EXPECT_TRUE(RelRmsWithin("dx", testing::FiniteDifferenceGradient(x, loss, 1e-2f), dx, 1e-3));
  EXPECT_TRUE(RelRmsWithin("dresidual", testing::FiniteDifferenceGradient(res, loss, 1e-2f), dx,
                           1e-3));
  EXPECT_TRUE(RelRmsWithin("dweight", testing::FiniteDifferenceGradient(w, loss, 1e-2f), dw, 1e-3));
  EXPECT_TRUE(RelRmsWithin("dgate", testing::FiniteDifferenceGradient(g, loss, 1e-2f), dg, 1e-3));
}

struct GpuCase {
  int rows;
  int dim;
  bool residual;
  bool weight;
  bool gate;
};

void RunGpuCase(const GpuCase& c) {
  const size_t n = static_cast<size_t>(c.rows) * c.dim;
  auto x = RandomBf16(n, -2, 2, 21), res = RandomBf16(n, -2, 2, 22);
  auto w = RandomBf16(c.dim, 0.5, 1.5, 23), g = RandomBf16(n, -4, 4, 24);
  auto dy = RandomBf16(n, -1, 1, 25), dres = RandomBf16(n, -1, 1, 26);
  const float* res_p = c.residual ? res.data() : nullptr;
  const float* w_p = c.weight ? w.data() : nullptr;
  const float* g_p = c.gate ? g.data() : nullptr;

  std::vector<float> y_ref(n), h_ref(n), rstd_ref(c.rows);
  RmsNormForwardReference(x.data(), res_p, w_p, g_p, c.rows, c.dim, kEps, y_ref.data(),
                          h_ref.data(), rstd_ref.data());
  auto d_x = ToDeviceBf16(x), d_res = ToDeviceBf16(res), d_w = ToDeviceBf16(w);
  auto d_g = ToDeviceBf16(g), d_dy = ToDeviceBf16(dy), d_dres = ToDeviceBf16(dres);
  DeviceBuffer<__nv_bfloat16> d_y(n), d_h(n), d_dx(n), d_dg(n);
  DeviceBuffer<float> d_rstd(c.rows), d_dw(c.dim);
  FLAME_ASSERT_CUDA(d_y.Poison());
  FLAME_ASSERT_CUDA(d_h.Poison());
  FLAME_ASSERT_CUDA(d_rstd.Poison());

  RmsNormForwardParams f;
  f.x = d_x->get();
  f.residual = c.residual ? d_res->get() : nullptr;
  f.weight = c.weight ? d_w->get() : nullptr;
  f.gate = c.gate ? d_g->get() : nullptr;
  f.y = d_y.get();
  f.residual_out = d_h.get();
  f.rstd = d_rstd.get();
  f.rows = c.rows;
  f.dim = c.dim;
  f.eps = kEps;
  FLAME_ASSERT_CUDA(RmsNormForward(f, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("y", ToHost(d_y), y_ref, 5e-3));
  EXPECT_TRUE(RelRmsWithin("residual_out", ToHost(d_h), h_ref, 3e-3));
  EXPECT_TRUE(RelRmsWithin("rstd", ToHost(d_rstd), rstd_ref, 1e-5));

  // The backward sees h as stored in bf16, the reference the same rounded values.
  const std::vector<float> h_bf16 = ToHost(d_h);
  std::vector<float> dx_ref(n), dg_ref(n), dw_ref(c.dim);
  const float* dres_p = c.residual ? dres.data() : nullptr;
  RmsNormBackwardReference(h_bf16.data(), w_p, g_p, dy.data(), dres_p, c.rows, c.dim, kEps,
                           dx_ref.data(), dg_ref.data(), dw_ref.data());
  DeviceBuffer<float> d_ws(RmsNormBackwardWorkspaceBytes(c.rows, c.dim) / sizeof(float));
  FLAME_ASSERT_CUDA(d_dx.Poison());
  FLAME_ASSERT_CUDA(d_dg.Poison());
  FLAME_ASSERT_CUDA(d_dw.Poison());
  RmsNormBackwardParams b;
  b.h = d_h.get();
  b.weight = f.weight;
  b.gate = f.gate;
  b.rstd = d_rstd.get();
  b.dy = d_dy->get();
  b.dresidual_out = c.residual ? d_dres->get() : nullptr;
  b.dx = d_dx.get();
  b.dgate = c.gate ? d_dg.get() : nullptr;
  b.dweight = c.weight ? d_dw.get() : nullptr;
  b.workspace = d_ws.get();
  b.rows = c.rows;
  b.dim = c.dim;
  FLAME_ASSERT_CUDA(RmsNormBackward(b, nullptr));
  FLAME_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(RelRmsWithin("dx", ToHost(d_dx), dx_ref, 5e-3));
  if (c.gate) {
    EXPECT_TRUE(RelRmsWithin("dgate", ToHost(d_dg), dg_ref, 5e-3));
  }
  if (c.weight) {
    EXPECT_TRUE(RelRmsWithin("dweight", ToHost(d_dw), dw_ref, 1e-3));
  }
}

TEST(RmsNormGpu, PrenormWithResidualMatchesReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({1000, 1024, true, true, false});
  RunGpuCase({517, 2048, true, true, false});
  RunGpuCase({64, 8192, true, true, false});
}

TEST(RmsNormGpu, PlainNormWithAndWithoutWeightMatchesReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({333, 1024, false, true, false});
  RunGpuCase({129, 200, false, false, false});  // D not a power of two
  RunGpuCase({2100, 8192, false, true, false});
}

TEST(RmsNormGpu, GatedPerHeadNormMatchesReference) {
  FLAME_SKIP_WITHOUT_GPU();
  RunGpuCase({4096 * 4 + 3, 64, false, true, true});  // (token, head) rows, head dim 64
  RunGpuCase({2048 * 2 + 1, 128, false, true, true});
  RunGpuCase({999, 512, false, true, true});
}

TEST(RmsNormGpu, RejectsMisalignedShapes) {
  RmsNormForwardParams f;
  f.rows = 4;
  f.dim = 12;  // not a multiple of 8
  EXPECT_EQ(RmsNormForward(f, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace flame::kernels
