// Time as a dependency, so that timeouts and schedules can be tested with a fake clock.
#pragma once

#include <atomic>
#include <cstdint>

namespace flame {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  static SystemClock* Get();
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1'000'000) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_.fetch_add(ms); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace flame
