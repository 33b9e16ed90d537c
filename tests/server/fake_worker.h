// A stand-in for flame-worker with real processes: a shell script named `flame-worker` that
// prints its environment to stdout and a line to stderr, then waits for the test to write
// <go_dir>/<job>-<attempt>, whose content is the exit code it then exits with.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gtest/gtest.h"

namespace flame::server::testing {

inline constexpr char kFakeWorkerScript[] = R"sh(#!/bin/sh
echo "rank=$RANK local_rank=$LOCAL_RANK world=$WORLD_SIZE job=$FLAME_JOB_ID attempt=$FLAME_ATTEMPT coordinator=$FLAME_COORDINATOR master=$MASTER_ADDR:$MASTER_PORT nvls=$NCCL_NVLS_ENABLE cuda=${CUDA_VISIBLE_DEVICES-unset}"
echo "local_world=$LOCAL_WORLD_SIZE token=${FLAME_TOKEN-unset}"
echo "a line on stderr" >&2
go="$FAKE_WORKER_GO_DIR/$FLAME_JOB_ID-$FLAME_ATTEMPT"
i=0
while [ ! -e "$go" ]; do
  i=$((i + 1))
  [ "$i" -gt 600 ] && exit 99  # never outlive a broken test by more than a minute
  sleep 0.1
done
exit "$(cat "$go")"
)sh";

// Writes the script as <dir>/bin/flame-worker and points it at <dir>/go for its go files.
inline std::string InstallFakeWorker(const std::string& dir) {
  const std::string bin = dir + "/bin";
  EXPECT_TRUE(MakeDirectories(bin).ok());
  EXPECT_TRUE(MakeDirectories(dir + "/go").ok());
  const std::string path = bin + "/flame-worker";
  EXPECT_TRUE(WriteFileAtomically(path, kFakeWorkerScript).ok());
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  ::setenv("FAKE_WORKER_GO_DIR", (dir + "/go").c_str(), 1);  // inherited by the workers
  return path;
}

// Lets the workers of (job, attempt) exit with `code`.
inline void ReleaseWorkers(const std::string& dir, const std::string& job_id, int attempt,
                           int code) {
  EXPECT_TRUE(
      WriteFileAtomically(absl::StrCat(dir, "/go/", job_id, "-", attempt), absl::StrCat(code))
          .ok());
}

// Polls `done` every 20 ms for up to `seconds`.
inline bool WaitFor(const std::function<bool()>& done, double seconds = 20) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace flame::server::testing
