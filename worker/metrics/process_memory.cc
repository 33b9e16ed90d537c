#include "worker/metrics/process_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace flame::worker {

ProcessMemory ReadProcessMemory() {
  // Lines look like "VmRSS:\t  123456 kB".
  constexpr double kKibPerGib = 1024.0 * 1024.0;
  ProcessMemory memory;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "VmRSS:") memory.resident_gib = kib / kKibPerGib;
    if (key == "VmHWM:") memory.peak_resident_gib = kib / kKibPerGib;
  }
  return memory;
}

}  // namespace flame::worker
