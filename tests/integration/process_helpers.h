// What the end-to-end test needs to drive real processes: run a command and collect its output,
// keep a daemon running in the background, wait for a file, and speak just enough HTTP to
// scrape /metrics.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flame::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with argv, stdin from /dev/null, and waits for it, killing it after
// `timeout`. FLAME_ADDR, FLAME_DATA_DIR and FLAME_TOKEN are removed from its environment so
// that the developer's own settings cannot steer the test.
CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::seconds timeout);

// A background process with stdout and stderr appended to a log file.
class BackgroundProcess {
 public:
  BackgroundProcess() = default;
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  ~BackgroundProcess();  // kills a process still running

  absl::Status Start(const std::vector<std::string>& argv, const std::string& log_path);
  bool Running();
  // SIGTERM, then waits up to `timeout`; returns its exit status, or an error if it had to be
  // killed.
  absl::StatusOr<int> Terminate(std::chrono::seconds timeout);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// Polls until `path` exists and holds every `key=` line in `keys`; returns its text.
absl::StatusOr<std::string> WaitForAddressFile(const std::string& path,
                                               const std::vector<std::string>& keys,
                                               std::chrono::seconds timeout);

// HTTP/1.0 GET of `path` from `host_port` over a plain socket; the body of a 200 answer.
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path);

// True if `pid` is alive and its command line names `program` (so that a recycled pid of an
// unrelated process is never touched).
bool IsProcessOf(pid_t pid, const std::string& program);

}  // namespace flame::testing
