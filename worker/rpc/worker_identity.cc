#include "worker/rpc/worker_identity.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

class EnvReader {
 public:
  explicit EnvReader(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}

  absl::StatusOr<std::string> Required(const char* name) const {
    const char* value = getenv_(name);
    if (value == nullptr || *value == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is not set (flame-worker is started by flamed)"));
    }
    return std::string(value);
  }

  std::string Optional(const char* name, const std::string& fallback) const {
    const char* value = getenv_(name);
    return value == nullptr || *value == '\0' ? fallback : std::string(value);
  }

  absl::StatusOr<int32_t> Int(const char* name, const std::string& text, int32_t min,
                              int32_t max) const {
    int32_t value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be an integer in [", min, ", ", max, "] (got \"", text, "\")"));
    }
    return value;
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
};

constexpr int32_t kMaxInt = 1 << 30;

}  // namespace

absl::StatusOr<WorkerIdentity> ParseWorkerIdentity(
    const std::function<const char*(const char*)>& getenv) {
  const EnvReader env(getenv);
  WorkerIdentity id;
  FLAME_ASSIGN_OR_RETURN(id.coordinator, env.Required("FLAME_COORDINATOR"));
  FLAME_ASSIGN_OR_RETURN(id.job_id, env.Required("FLAME_JOB_ID"));
  FLAME_ASSIGN_OR_RETURN(const std::string attempt, env.Required("FLAME_ATTEMPT"));
  FLAME_ASSIGN_OR_RETURN(id.attempt, env.Int("FLAME_ATTEMPT", attempt, 1, kMaxInt));
  FLAME_ASSIGN_OR_RETURN(const std::string world, env.Required("WORLD_SIZE"));
  FLAME_ASSIGN_OR_RETURN(id.world_size, env.Int("WORLD_SIZE", world, 1, kMaxInt));
  FLAME_ASSIGN_OR_RETURN(const std::string rank, env.Required("RANK"));
  FLAME_ASSIGN_OR_RETURN(id.rank, env.Int("RANK", rank, 0, id.world_size - 1));
  FLAME_ASSIGN_OR_RETURN(id.local_rank,
                         env.Int("LOCAL_RANK", env.Optional("LOCAL_RANK", rank), 0, kMaxInt));
  id.master_addr = env.Optional("MASTER_ADDR", id.master_addr);
  if (id.world_size > 1) {
    FLAME_ASSIGN_OR_RETURN(const std::string port, env.Required("MASTER_PORT"));
    FLAME_ASSIGN_OR_RETURN(id.master_port, env.Int("MASTER_PORT", port, 1, 65535));
  }
  id.token = env.Optional("FLAME_TOKEN", "");
  return id;
}

absl::StatusOr<WorkerIdentity> WorkerIdentityFromEnvironment() {
  return ParseWorkerIdentity([](const char* name) { return std::getenv(name); });
}

}  // namespace flame::worker
