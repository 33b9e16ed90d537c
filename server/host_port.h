// "HOST:PORT" addresses as flamed's flags and flamed.addr write them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flame::server {

struct HostPort {
  std::string host;  // as written: "127.0.0.1", "localhost", "[::1]", "0.0.0.0"
  int port = 0;      // 0..65535; 0 asks the kernel for a free port
};

// Splits at the last ':'. INVALID_ARGUMENT naming `flag` when the address is malformed.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view flag);

std::string JoinHostPort(const std::string& host, int port);

// The host a client on this machine should dial to reach a server bound to `host`: the
// wildcard addresses become loopback.
std::string DialableHost(const std::string& host);

}  // namespace flame::server
