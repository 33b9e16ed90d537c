#include "server/local_launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"

extern char** environ;

namespace flame::server {
namespace {

absl::Status ErrnoError(int error, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, ": ", strerror(error)));
}

// The variables flamed sets for a worker; inherited values of these are dropped.
constexpr const char* kWorkerVariables[] = {
    "FLAME_COORDINATOR", "FLAME_JOB_ID",        "FLAME_ATTEMPT",    "FLAME_TOKEN", "RANK",
    "LOCAL_RANK",        "WORLD_SIZE",          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "NCCL_NVLS_ENABLE",  "CUDA_VISIBLE_DEVICES"};

std::vector<std::string> InheritedEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view variable(*entry);
    bool ours = false;
    for (const char* name : kWorkerVariables) {
      ours = ours || absl::StartsWith(variable, absl::StrCat(name, "="));
    }
    if (!ours) env.emplace_back(variable);
  }
  return env;
}

std::vector<std::string> RankEnvironment(const LaunchRequest& request, const LaunchResult& result,
                                         int rank) {
  std::vector<std::string> env = InheritedEnvironment();
  const int world_size = static_cast<int>(request.slots.size());
  env.push_back(absl::StrCat("FLAME_COORDINATOR=", request.coordinator_address));
  env.push_back(absl::StrCat("FLAME_JOB_ID=", request.job_id));
  env.push_back(absl::StrCat("FLAME_ATTEMPT=", request.attempt));
  env.push_back(absl::StrCat("RANK=", rank));
  env.push_back(absl::StrCat("LOCAL_RANK=", rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", world_size));
  env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", world_size));  // every rank runs on this host
  if (!request.auth_token.empty()) env.push_back(absl::StrCat("FLAME_TOKEN=", request.auth_token));
  env.push_back(absl::StrCat("MASTER_ADDR=", result.master_addr));
  env.push_back(absl::StrCat("MASTER_PORT=", result.master_port));
  // NVLink SHARP multicast hangs NCCL init on some hosts; flame does not need it.
  env.push_back("NCCL_NVLS_ENABLE=0");
  if (request.hide_gpus) {
    env.push_back("CUDA_VISIBLE_DEVICES=");
  } else if (request.gpu_slots) {
    env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(request.slots, ",")));
  }
  return env;
}

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Opens the rank's log for appending and writes the attempt's banner line.
absl::StatusOr<int> OpenRankLog(const std::string& path, const LaunchRequest& request, int rank) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("open log ", path));
  const std::string banner = absl::StrCat(
      "==== flame job ", request.job_id, " attempt ", request.attempt, " rank ", rank, " of ",
      request.slots.size(), " starting at ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()), " ====\n");
  if (::write(fd, banner.data(), banner.size()) != static_cast<ssize_t>(banner.size())) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, absl::StrCat("write log ", path));
  }
  return fd;
}

// posix_spawn with setsid: safe to call from a multi-threaded daemon (no code runs between fork
// and exec in our address space) and reports exec failures as an error code.
absl::StatusOr<int64_t> SpawnWorker(const std::string& binary, int log_fd,
                                    std::vector<std::string> env) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);

  // flamed blocks its termination signals (a thread waits for them) and ignores SIGPIPE; a
  // worker must start with neither.
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int signal : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, signal);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_strings = {binary};
  std::vector<char*> argv = PointersTo(argv_strings);
  std::vector<char*> envp = PointersTo(env);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, binary.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (error != 0) return ErrnoError(error, absl::StrCat("start worker ", binary));
  return static_cast<int64_t>(pid);
}

// One rank: its log (with the banner) as stdout and stderr, its environment, its process.
absl::StatusOr<int64_t> StartRank(const std::string& binary, const std::string& log_path,
                                  const LaunchRequest& request, const LaunchResult& result,
                                  int rank) {
  FLAME_ASSIGN_OR_RETURN(const int log_fd, OpenRankLog(log_path, request, rank));
  absl::StatusOr<int64_t> pid = SpawnWorker(binary, log_fd, RankEnvironment(request, result, rank));
  ::close(log_fd);  // the worker has its own copy
  return pid;
}

void KillAndReap(const std::vector<LaunchedRank>& ranks) {
  for (const LaunchedRank& rank : ranks) {
    ::kill(-static_cast<pid_t>(rank.pid), SIGKILL);
    int status = 0;
    ::waitpid(static_cast<pid_t>(rank.pid), &status, 0);
  }
}

absl::StatusOr<std::string> ReadProcFile(int64_t pid, absl::string_view name) {
  return ReadFileToString(absl::StrCat("/proc/", pid, "/", name));
}

// NUL-separated entries of a /proc file, e.g. environ.
bool HasEntry(const std::string& entries, const std::string& wanted) {
  size_t start = 0;
  while (start < entries.size()) {
    size_t end = entries.find('\0', start);
    if (end == std::string::npos) end = entries.size();
    if (entries.compare(start, end - start, wanted) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

LocalLauncher::LocalLauncher(std::string worker_binary)
    : worker_binary_(std::move(worker_binary)) {}

absl::StatusOr<LaunchResult> LocalLauncher::Launch(const LaunchRequest& request) {
  if (request.slots.empty()) return absl::InvalidArgumentError("a launch needs at least one rank");
  if (::access(worker_binary_.c_str(), X_OK) != 0) {
    return ErrnoError(errno, absl::StrCat("worker binary ", worker_binary_,
                                          " cannot be executed (flamed --worker_binary)"));
  }
  FLAME_RETURN_IF_ERROR(MakeDirectories(request.log_dir));
  LaunchResult result;
  // Workers and flamed share this host, so the rendezvous stays on loopback.
  result.master_addr = "127.0.0.1";
  FLAME_ASSIGN_OR_RETURN(result.master_port, PickFreeTcpPort(result.master_addr));

  for (int rank = 0; rank < static_cast<int>(request.slots.size()); ++rank) {
    const std::string log_path = absl::StrCat(request.log_dir, "/rank-", rank, ".log");
    absl::StatusOr<int64_t> pid = StartRank(worker_binary_, log_path, request, result, rank);
    if (!pid.ok()) {
      KillAndReap(result.ranks);  // all ranks or none
      return absl::Status(pid.status().code(),
                          absl::StrCat("rank ", rank, ": ", pid.status().message()));
    }
    result.ranks.push_back(LaunchedRank{rank, *pid, log_path});
  }
  return result;
}

ProcessState LocalLauncher::Poll(int64_t pid, const std::string& job_id, int attempt) {
  int status = 0;
  const pid_t waited = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
  if (waited == static_cast<pid_t>(pid)) {
    if (WIFEXITED(status)) return {ProcessState::Kind::kExited, WEXITSTATUS(status)};
    if (WIFSIGNALED(status)) return {ProcessState::Kind::kExited, 128 + WTERMSIG(status)};
    return {ProcessState::Kind::kRunning, 0};  // stopped or continued: still there
  }
  if (waited == 0) return {ProcessState::Kind::kRunning, 0};
  // Not our child (a worker started by an earlier flamed): all we can learn is whether it
  // still runs; its exit code went to whoever reaped it.
  if (IsOurWorker(pid, job_id, attempt)) return {ProcessState::Kind::kRunning, 0};
  return {ProcessState::Kind::kExited, -1};
}

bool LocalLauncher::IsOurWorker(int64_t pid, const std::string& job_id, int attempt) const {
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return false;
  // A zombie or a reused pid has an empty or different command line.
  absl::StatusOr<std::string> cmdline = ReadProcFile(pid, "cmdline");
  const std::string binary_name = std::filesystem::path(worker_binary_).filename().string();
  if (!cmdline.ok() || !absl::StrContains(*cmdline, binary_name)) return false;
  absl::StatusOr<std::string> environment = ReadProcFile(pid, "environ");
  if (!environment.ok() || environment->empty()) return true;  // not readable: cmdline decides
  return HasEntry(*environment, absl::StrCat("FLAME_JOB_ID=", job_id)) &&
         HasEntry(*environment, absl::StrCat("FLAME_ATTEMPT=", attempt));
}

bool LocalLauncher::IsUnreapedChild(int64_t pid) {
  siginfo_t info{};
  // WNOWAIT: look without reaping, so that Poll still gets the exit status.
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

void LocalLauncher::Signal(int64_t pid, const std::string& job_id, int attempt, int signal) {
  if (pid <= 0) return;
  if (!IsUnreapedChild(pid) && !IsOurWorker(pid, job_id, attempt)) return;
  // The worker leads its process group (setsid), so -pid reaches the threads' helpers too.
  if (::kill(-static_cast<pid_t>(pid), signal) != 0 && errno == ESRCH) {
    ::kill(static_cast<pid_t>(pid), signal);
  }
}

std::string DefaultWorkerBinary() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "flame-worker";
  return (self.parent_path() / "flame-worker").string();
}

absl::StatusOr<int> PickFreeTcpPort(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, absl::StrCat("pick a free port on ", host));
  }
  ::close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

}  // namespace flame::server
