// The whole coordinator in one object: job store, job manager, supervisor, metrics endpoint and
// gRPC server, started in the right order and stopped in the reverse one. main.cc parses flags
// and signals around it; tests start one in-process on port 0.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/job_manager.h"
#include "server/scheduler.h"

namespace grpc {
class Server;
}

namespace flame::server {

class CoordinatorService;
class LocalLauncher;
class Metrics;
class RocksDbJobStore;
class Supervisor;
class WorkerService;

struct DaemonOptions {
  std::string listen = "127.0.0.1:7470";          // gRPC; port 0 picks a free one
  std::string metrics_listen = "127.0.0.1:9470";  // Prometheus /metrics; port 0 likewise
  std::string data_dir;                           // RocksDB, jobs/, flamed.addr
  std::string worker_binary;                      // flame-worker
  SlotPool pool;                                  // GPUs, or CPU slots
  std::string auth_token;                         // empty: no token needed
  absl::Duration heartbeat_timeout = absl::Seconds(60);
  absl::Duration stop_grace = absl::Seconds(30);
  absl::Duration pause_grace = absl::Minutes(10);
  absl::Duration kill_grace = absl::Seconds(10);
  absl::Duration supervise_period = absl::Milliseconds(200);
};

class Daemon {
 public:
  // Opens the store, recovers every job, binds both listeners, writes <data_dir>/flamed.addr
  // (exactly "grpc=HOST:PORT\nmetrics=HOST:PORT\n", the bound ports) and starts supervising.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();  // Shutdown()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Stops accepting calls, ends streams, stops supervision, flushes and closes the store and
  // removes flamed.addr. Running workers are left alone: they keep training and report to the
  // next flamed. Idempotent.
  void Shutdown();

  const std::string& grpc_address() const { return grpc_address_; }        // HOST:PORT bound
  const std::string& metrics_address() const { return metrics_address_; }  // HOST:PORT bound
  const std::string& addr_file() const { return addr_file_; }
  JobManager& manager() { return *manager_; }
  Metrics& metrics() { return *metrics_; }

 private:
  explicit Daemon(DaemonOptions options);
  absl::Status StartServing();

  DaemonOptions options_;
  std::string grpc_address_;
  std::string metrics_address_;
  std::string addr_file_;
  std::unique_ptr<RocksDbJobStore> store_;
  std::unique_ptr<LocalLauncher> launcher_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<CoordinatorService> coordinator_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

}  // namespace flame::server
