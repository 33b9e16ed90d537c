// Memory of this process as the kernel counts it (/proc/self/status), for CPU ranks, where
// LibTorch's allocator keeps no statistics.
#pragma once

namespace flame::worker {

struct ProcessMemory {
  double resident_gib = 0;       // VmRSS: resident set now
  double peak_resident_gib = 0;  // VmHWM: the largest resident set since the process started
};

// Zeros when /proc is not readable (the report then shows 0, the training goes on).
ProcessMemory ReadProcessMemory();

}  // namespace flame::worker
