#include "tests/integration/process_helpers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace flame::testing {
namespace {

using Clock = std::chrono::steady_clock;

// execv's argument vector, built before fork so that the child does not allocate.
std::vector<char*> ArgumentVector(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  return args;
}

// In the child between fork and exec: only async-signal-safe calls, then exec or _exit.
[[noreturn]] void ExecChild(const std::vector<char*>& args, int stdout_fd, int stderr_fd) {
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(stdout_fd, STDOUT_FILENO);
  ::dup2(stderr_fd, STDERR_FILENO);
  ::execv(args[0], args.data());
  ::_exit(127);
}

// The environment the children get: ours without the variables that choose a flamed.
void ScrubEnvironment() {
  for (const char* name : {"FLAME_ADDR", "FLAME_DATA_DIR", "FLAME_TOKEN"}) ::unsetenv(name);
}

int ExitCodeOf(int wait_status) { return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1; }

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  ScrubEnvironment();
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.err = absl::StrCat("pipe: ", std::strerror(errno));
    return result;
  }
  const std::vector<char*> args = ArgumentVector(argv);
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(args, out_pipe[1], err_pipe[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    result.err = absl::StrCat("fork: ", std::strerror(errno));
    return result;
  }

  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = result.timed_out ? -1 : ExitCodeOf(status);
  return result;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && Running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

absl::Status BackgroundProcess::Start(const std::vector<std::string>& argv,
                                      const std::string& log_path) {
  ScrubEnvironment();
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("open ", log_path));
  const std::vector<char*> args = ArgumentVector(argv);
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(args, log_fd, log_fd);
  ::close(log_fd);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  pid_ = pid;
  return absl::OkStatus();
}

bool BackgroundProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

absl::StatusOr<int> BackgroundProcess::Terminate(std::chrono::seconds timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  ::kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return ExitCodeOf(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return absl::DeadlineExceededError("did not exit after SIGTERM; killed");
}

absl::StatusOr<std::string> WaitForAddressFile(const std::string& path,
                                               const std::vector<std::string>& keys,
                                               std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (absl::StatusOr<std::string> text = ReadFileToString(path); text.ok()) {
      bool complete = true;
      for (const std::string& key : keys) {
        complete = complete && (absl::StartsWith(*text, key + "=") ||
                                absl::StrContains(*text, "\n" + key + "="));
      }
      if (complete) return text;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(path, " did not appear"));
}

absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", host_port));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host_port));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", host_port, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send");
  }
  std::string response;
  char buffer[8192];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: ", response.substr(0, 200)));
  }
  if (response.find(" 200 ") > response.find("\r\n")) {
    return absl::UnavailableError(response.substr(0, response.find("\r\n")));
  }
  return response.substr(body + 4);
}

bool IsProcessOf(pid_t pid, const std::string& program) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  absl::StatusOr<std::string> cmdline = ReadFileToString(absl::StrCat("/proc/", pid, "/cmdline"));
  return cmdline.ok() && absl::StrContains(*cmdline, program);
}

}  // namespace flame::testing
