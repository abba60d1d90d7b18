#include "node/file_use.h"

#include <algorithm>

namespace shmkeeper {

void FileUse::Remember(pid_t pid) {
  std::erase(pids_, pid);
  pids_.push_back(pid);
  if (pids_.size() > kMaxPids) pids_.erase(pids_.begin());
}

void FileUse::MarkStale() {
  switch (state_) {
    case State::kProbing:
      state_ = State::kProbingStale;
      break;
    case State::kHeld:
    case State::kUnheld:
      state_ = State::kDirty;
      break;
    case State::kUnprobed:
    case State::kProbingStale:
    case State::kDirty:
      break;
  }
}

void FileUse::OnUse(TimePoint now, pid_t pid) {
  MarkStale();
  last_use_ = now;
  rechecked_ = false;
  if (holders_ == Holders::kWalkedEmpty) holders_ = Holders::kUnasked;
  if (pid > 0) Remember(pid);
}

bool FileUse::OnProberClose() {
  prober_closed_ = true;
  bool probing = state_ == State::kProbing || state_ == State::kProbingStale;
  if (rechecked_ || !(probing || state_ == State::kHeld)) return false;
  MarkStale();
  rechecked_ = true;
  return true;
}

void FileUse::ProbeBegan(TimePoint now) {
  state_ = State::kProbing;
  probed_at_ = now;
  prober_closed_ = false;
}

void FileUse::ProbeEnded(Verdict v, const std::vector<pid_t>& holders, bool holders_pending) {
  for (pid_t pid : holders) Remember(pid);
  if (holders_pending) {
    holders_ = Holders::kPending;
  } else if (holders_ == Holders::kPending) {
    holders_ = Holders::kUnasked;
  }
  held_ = v == Verdict::kHeld || v == Verdict::kFailed;
  if (state_ != State::kProbing || v == Verdict::kGone || v == Verdict::kFailed) {
    state_ = State::kDirty;
  } else {
    state_ = held_ ? State::kHeld : State::kUnheld;
  }
}

void FileUse::WalkFound(const std::vector<pid_t>& pids) {
  if (pids.empty()) {
    // Held by no process /proc shows (a mount, a loop device, an O_PATH or
    // a lease's holder): probe it again, without a walk.
    if (holders_ == Holders::kPending) MarkStale();
    holders_ = Holders::kWalkedEmpty;
    return;
  }
  for (pid_t pid : pids) Remember(pid);
  holders_ = Holders::kUnasked;
}

void FileUse::Seed(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (pid <= 0 || std::find(pids_.begin(), pids_.end(), pid) != pids_.end()) continue;
    pids_.insert(pids_.begin(), pid);  // older than any pid an event names
    if (pids_.size() > kMaxPids) pids_.erase(pids_.begin());
  }
}

FileUse::State FileUse::state(std::optional<TimePoint> floor) const {
  bool settled = state_ == State::kHeld || state_ == State::kUnheld;
  if (settled && floor && probed_at_ <= *floor) return State::kDirty;
  return state_;
}

bool FileUse::NeedsProbe(std::optional<TimePoint> floor) const {
  State s = state(floor);
  return s != State::kHeld && s != State::kUnheld;
}

std::optional<bool> FileUse::Settled(std::optional<TimePoint> floor) const {
  if (NeedsProbe(floor)) return std::nullopt;
  return held_;
}

std::optional<FileUse::TimePoint> FileUse::LastActivity(std::optional<TimePoint> floor) const {
  std::optional<TimePoint> t = last_use_;
  if (floor && (!t || *floor > *t)) t = floor;
  return t;
}

}  // namespace shmkeeper
