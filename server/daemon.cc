#include "server/daemon.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/coordinator_service.h"
#include "server/host_port.h"
#include "server/local_launcher.h"
#include "server/metrics.h"
#include "server/rocksdb_job_store.h"
#include "server/supervisor.h"
#include "server/worker_service.h"

namespace flame::server {

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data_dir must be set");
  if (options.pool.count <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("this host has no slots to run workers on (",
                                                   options.pool.count, " ",
                                                   SlotKindName(options.pool.kind), "s)"));
  }
  FLAME_RETURN_IF_ERROR(ParseHostPort(options.listen, "listen").status());
  FLAME_ASSIGN_OR_RETURN(const HostPort metrics_listen,
                         ParseHostPort(options.metrics_listen, "metrics_listen"));
  options.data_dir = AbsolutePath(options.data_dir);
  FLAME_RETURN_IF_ERROR(MakeDirectories(options.data_dir));
  if (::access(options.worker_binary.c_str(), X_OK) != 0) {
    FLAME_LOG(WARNING) << "worker binary " << options.worker_binary
                       << " is not executable; jobs will fail to start (--worker_binary)";
  }

  std::unique_ptr<Daemon> daemon(new Daemon(options));
  FLAME_ASSIGN_OR_RETURN(daemon->store_, RocksDbJobStore::Open(options.data_dir + "/db"));
  daemon->launcher_ = std::make_unique<LocalLauncher>(options.worker_binary);
  FLAME_ASSIGN_OR_RETURN(daemon->metrics_, Metrics::Serve(options.metrics_listen));
  daemon->metrics_address_ = JoinHostPort(metrics_listen.host, daemon->metrics_->port());

  JobManagerOptions manager_options;
  manager_options.data_dir = options.data_dir;
  manager_options.heartbeat_timeout = options.heartbeat_timeout;
  manager_options.stop_grace = options.stop_grace;
  manager_options.pause_grace = options.pause_grace;
  manager_options.kill_grace = options.kill_grace;
  manager_options.worker_token = options.auth_token;
  daemon->manager_ = std::make_unique<JobManager>(manager_options, options.pool,
                                                  daemon->store_.get(), daemon->launcher_.get(),
                                                  SystemClock::Get(), daemon->metrics_.get());
  FLAME_RETURN_IF_ERROR(daemon->manager_->Recover());
  FLAME_RETURN_IF_ERROR(daemon->StartServing());
  return daemon;
}

absl::Status Daemon::StartServing() {
  FLAME_ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(options_.listen, "listen"));
  coordinator_service_ = std::make_unique<CoordinatorService>(
      manager_.get(), CoordinatorServiceOptions{options_.auth_token});
  worker_service_ = std::make_unique<WorkerService>(manager_.get(), options_.auth_token);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(coordinator_service_.get());
  builder.RegisterService(worker_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options_.listen, " (address in use?)"));
  }
  grpc_address_ = JoinHostPort(listen.host, bound_port);
  // Workers start only now that they know where to report.
  manager_->SetCoordinatorAddress(JoinHostPort(DialableHost(listen.host), bound_port));

  addr_file_ = options_.data_dir + "/flamed.addr";
  FLAME_RETURN_IF_ERROR(WriteFileAtomically(
      addr_file_, absl::StrCat("grpc=", grpc_address_, "\nmetrics=", metrics_address_, "\n")));
  supervisor_ = std::make_unique<Supervisor>(manager_.get(), options_.supervise_period);
  supervisor_->Start();
  FLAME_LOG(INFO) << "flamed serving gRPC on " << grpc_address_ << ", metrics on http://"
                  << metrics_address_ << "/metrics, data in " << options_.data_dir << " ("
                  << options_.pool.count << " " << SlotKindName(options_.pool.kind) << "s)";
  return absl::OkStatus();
}

void Daemon::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  // Streams notice the manager's shutdown within a poll period; unary calls get a moment to
  // finish, then are cancelled.
  if (manager_ != nullptr) manager_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  if (supervisor_ != nullptr) supervisor_->Stop();
  if (store_ != nullptr) {
    const absl::Status flushed = store_->Flush();
    if (!flushed.ok()) {
      FLAME_LOG(WARNING) << flushed;
    }
  }
  if (!addr_file_.empty()) std::remove(addr_file_.c_str());
  FLAME_LOG(INFO) << "flamed stopped; running workers were left running";
}

}  // namespace flame::server
