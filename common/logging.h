// Minimal leveled logging to stderr: `FLAME_LOG(INFO) << "joined rank " << r;`
// One line per statement, prefixed with the level, a UTC timestamp and the source position,
// written with a single write(2) so that lines of concurrent threads do not interleave.
#pragma once

#include <sstream>

namespace flame {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; FLAME_LOG_LEVEL=debug|info|warning|error.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace flame

#define FLAME_LOG_LEVEL_DEBUG ::flame::LogLevel::kDebug
#define FLAME_LOG_LEVEL_INFO ::flame::LogLevel::kInfo
#define FLAME_LOG_LEVEL_WARNING ::flame::LogLevel::kWarning
#define FLAME_LOG_LEVEL_ERROR ::flame::LogLevel::kError

#define FLAME_LOG(level)                                           \
  if (FLAME_LOG_LEVEL_##level < ::flame::MinLogLevel()) {          \
  } else                                                           \
    ::flame::LogMessage(FLAME_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
