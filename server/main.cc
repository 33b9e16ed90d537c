// flamed: the flame coordinator daemon. Parses flags, starts a Daemon, and waits for SIGTERM or
// SIGINT to shut it down cleanly (running workers are left running; see daemon.h).
#include <signal.h>

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/logging.h"
#include "server/daemon.h"
#include "server/host_resources.h"
#include "server/local_launcher.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7470", "gRPC address HOST:PORT (port 0: any free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9470",
          "Prometheus /metrics address HOST:PORT (port 0: any free port)");
ABSL_FLAG(std::string, data_dir, "",
          "State directory (RocksDB, job logs, flamed.addr); default $FLAME_DATA_DIR, else "
          "$XDG_STATE_HOME/flame or ~/.local/state/flame");
ABSL_FLAG(std::string, worker_binary, "",
          "flame-worker executable; default: flame-worker next to flamed");
ABSL_FLAG(int, cpu_slots, 0, "CPU slots when the host has no GPUs; 0: one per online CPU");
ABSL_FLAG(int, gpus, -1, "GPUs to schedule on; -1: count /dev/nvidia[0-9]*");
ABSL_FLAG(int, heartbeat_timeout_s, 60,
          "End an attempt when a rank sends no heartbeat for this many seconds");
ABSL_FLAG(int, stop_grace_s, 30, "Seconds workers get to obey a cancel before SIGTERM");
ABSL_FLAG(int, pause_grace_s, 600, "Seconds workers get to checkpoint and exit on a pause");
ABSL_FLAG(int, kill_grace_s, 10, "Seconds between SIGTERM and SIGKILL when tearing down");
ABSL_FLAG(std::string, auth_token, "",
          "Bearer token required on the calls that change jobs (and from workers, which get it "
          "as FLAME_TOKEN); default $FLAME_TOKEN, which keeps it out of the process list; "
          "empty: no token");

namespace {

std::string DataDirectory() {
  std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!data_dir.empty()) return data_dir;
  if (const char* env = std::getenv("FLAME_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return flame::DefaultDataDirectory();
}

flame::server::DaemonOptions OptionsFromFlags() {
  flame::server::DaemonOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.data_dir = DataDirectory();
  options.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  if (options.worker_binary.empty()) options.worker_binary = flame::server::DefaultWorkerBinary();
  options.worker_binary = flame::AbsolutePath(options.worker_binary);
  options.pool =
      flame::server::DetectSlotPool(absl::GetFlag(FLAGS_gpus), absl::GetFlag(FLAGS_cpu_slots));
  options.auth_token = absl::GetFlag(FLAGS_auth_token);
  if (const char* env = std::getenv("FLAME_TOKEN"); options.auth_token.empty() && env != nullptr) {
    options.auth_token = env;
  }
  options.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  options.stop_grace = absl::Seconds(absl::GetFlag(FLAGS_stop_grace_s));
  options.pause_grace = absl::Seconds(absl::GetFlag(FLAGS_pause_grace_s));
  options.kill_grace = absl::Seconds(absl::GetFlag(FLAGS_kill_grace_s));
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("flame coordinator daemon: queues, runs and supervises jobs");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_heartbeat_timeout_s) <= 0 || absl::GetFlag(FLAGS_stop_grace_s) < 0 ||
      absl::GetFlag(FLAGS_pause_grace_s) < 0 || absl::GetFlag(FLAGS_kill_grace_s) < 0) {
    FLAME_LOG(ERROR) << "--heartbeat_timeout_s must be positive and the grace periods >= 0";
    return 2;
  }

  // Block the termination signals in every thread (threads inherit the mask, so do this before
  // any start) and take them synchronously below. Workers get a clean mask (LocalLauncher).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<flame::server::Daemon>> daemon =
      flame::server::Daemon::Start(OptionsFromFlags());
  if (!daemon.ok()) {
    FLAME_LOG(ERROR) << "flamed cannot start: " << daemon.status();
    return 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  FLAME_LOG(INFO) << "received " << strsignal(signal_number) << "; shutting down";
  (*daemon)->Shutdown();
  return 0;
}
