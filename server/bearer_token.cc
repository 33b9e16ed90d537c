#include "server/bearer_token.h"

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace flame::server {
namespace {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this flamed requires a bearer token (authorization metadata)");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kScheme = "Bearer ";
  if (!absl::StartsWith(value, kScheme) ||
      !ConstantTimeEquals(value.substr(kScheme.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token is not valid");
  }
  return grpc::Status::OK;
}

}  // namespace flame::server
