#include "server/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace flame::server {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view flag) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " must be HOST:PORT with a port in 0..65535 (got \"", address, "\")"));
  }
  return HostPort{std::string(address.substr(0, colon)), port};
}

std::string JoinHostPort(const std::string& host, int port) {
  return absl::StrCat(host, ":", port);
}

std::string DialableHost(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "[::]" || host == "::") return "[::1]";
  return host;
}

}  // namespace flame::server
