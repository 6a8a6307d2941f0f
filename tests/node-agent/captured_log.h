// The agent's log lines while a test runs (tessera::log's sink), every line kept (no repeat
// window); the default setup is restored when it goes.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/log.h"

namespace tessera::agent::testing {

class CapturedLog {
 public:
  CapturedLog() {
    log::Options options;
    options.logger = "test";
    options.repeat_window = std::chrono::milliseconds(0);
    options.sink = [this](std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    };
    log::configure(options);
  }
  ~CapturedLog() { log::configure(log::Options{}); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // Lines that contain `text`.
  size_t count(std::string_view text) {
    std::lock_guard lock(mutex_);
    size_t found = 0;
    for (const std::string& line : lines_) found += line.find(text) != std::string::npos;
    return found;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

}  // namespace tessera::agent::testing
