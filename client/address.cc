#include "client/address.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace flame::client {

std::string ResolveDataDirectory(const AddressSources& sources) {
  if (!sources.data_dir_flag.empty()) return sources.data_dir_flag;
  if (!sources.data_dir_env.empty()) return sources.data_dir_env;
  return DefaultDataDirectory();
}

absl::StatusOr<std::string> FindAddressLine(absl::string_view text, absl::string_view key) {
  const std::string prefix = absl::StrCat(key, "=");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, prefix) && line.size() > prefix.size()) {
      return std::string(line.substr(prefix.size()));
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", prefix, " line"));
}

absl::StatusOr<std::string> ResolveCoordinatorAddress(const AddressSources& sources) {
  if (!sources.addr_flag.empty()) return sources.addr_flag;
  if (!sources.addr_env.empty()) return sources.addr_env;
  const std::string path = absl::StrCat(ResolveDataDirectory(sources), "/flamed.addr");
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "no flamed address: pass --addr or set FLAME_ADDR, or start flamed (it writes ", path,
        ")"));
  }
  absl::StatusOr<std::string> address = FindAddressLine(*text, "grpc");
  if (!address.ok()) {
    return absl::UnavailableError(absl::StrCat("no grpc= line in ", path));
  }
  return address;
}

}  // namespace flame::client
