// Where flamed is: the first of --addr, $FLAME_ADDR, and the `grpc=` line of
// <data_dir>/flamed.addr, which flamed writes after binding (so port 0 works), with data_dir the
// first of --data-dir, $FLAME_DATA_DIR and flame::DefaultDataDirectory().
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flame::client {

struct AddressSources {
  std::string addr_flag;      // --addr
  std::string addr_env;       // $FLAME_ADDR
  std::string data_dir_flag;  // --data-dir
  std::string data_dir_env;   // $FLAME_DATA_DIR
};

// The data directory the sources name (the flag, the environment, else the per-user default).
std::string ResolveDataDirectory(const AddressSources& sources);

// The gRPC address of flamed, or UNAVAILABLE (exit code 4) saying where it looked.
absl::StatusOr<std::string> ResolveCoordinatorAddress(const AddressSources& sources);

// The value of the `key=` line of an address file's text ("grpc", "metrics"), or NOT_FOUND.
absl::StatusOr<std::string> FindAddressLine(absl::string_view text, absl::string_view key);

}  // namespace flame::client
