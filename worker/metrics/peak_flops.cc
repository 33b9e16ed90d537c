#include "worker/metrics/peak_flops.h"

#include "absl/strings/match.h"

namespace flame::worker {

std::optional<double> PeakBf16Flops(const std::string& device_name) {
  // Most specific names first: "H100 NVL" and "H100 PCIe" are also "H100". A plain "H100" is
  // the SXM part (CUDA names it "NVIDIA H100 80GB HBM3", without a form factor).
  struct Entry {
    const char* name_part;
    double flops;
  };
  static constexpr Entry kTable[] = {
      {"B200", 2.25e15}, {"H200", 989e12}, {"H100 NVL", 835e12}, {"H100 PCIe", 756e12},
      {"H100", 989e12},  {"A100", 312e12}, {"L40S", 362e12},
  };
  for (const Entry& entry : kTable) {
    if (absl::StrContains(device_name, entry.name_part)) return entry.flops;
  }
  return std::nullopt;
}

}  // namespace flame::worker
