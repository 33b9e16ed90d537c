#include "kernels/l2norm/l2norm_reference.h"

#include <cmath>

namespace flame::kernels {
namespace {

double RowRstd(const float* x, int dim, float eps) {
  double sum_sq = 0.0;
  for (int i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  return 1.0 / std::sqrt(sum_sq + eps);
}

}  // namespace

void L2NormForwardReference(const float* x, int64_t rows, int dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const double rstd = RowRstd(xr, dim, eps);
    for (int i = 0; i < dim; ++i) y[r * dim + i] = static_cast<float>(xr[i] * rstd);
  }
}

void L2NormBackwardReference(const float* x, const float* dy, int64_t rows, int dim, float eps,
                             float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const double rstd = RowRstd(xr, dim, eps);
    double dot_y = 0.0;  // sum dy * y
    for (int i = 0; i < dim; ++i) dot_y += dyr[i] * (xr[i] * rstd);
    for (int i = 0; i < dim; ++i) {
      dx[r * dim + i] = static_cast<float>(rstd * (dyr[i] - xr[i] * rstd * dot_y));
    }
  }
}

}  // namespace flame::kernels
