#include "node/reporter.h"

namespace shmkeeper {

void Reporter::Report(const std::string& counter, const std::string& message) {
  std::string line;
  {
    MutexLock l(&mu_);
    counts_[counter]++;
    Window& w = windows_[counter];
    auto now = clock_->Now();
    if (now - w.start >= kWindow) {
      if (w.dropped) line = std::to_string(w.dropped) + " more " + counter + " were not logged; ";
      w = Window{now, 0, 0};
    }
    if (w.logged >= kLinesPerWindow) {
      w.dropped++;
      return;
    }
    w.logged++;
  }
  log_(LogLevel::kWarn, line + message);
}

int64_t Reporter::Count(const std::string& counter) const {
  MutexLock l(&mu_);
  auto it = counts_.find(counter);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace shmkeeper
