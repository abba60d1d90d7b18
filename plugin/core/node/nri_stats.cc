#include "node/nri_stats.h"

namespace shmkeeper {

void NriStats::SetSocket(const std::string& socket) {
  MutexLock l(&mu_);
  state_.socket = socket;
}

void NriStats::Connected() {
  MutexLock l(&mu_);
  state_.connected = true;
  ++state_.connections;
  state_.last_error.clear();
}

void NriStats::Disconnected(const std::string& why) {
  MutexLock l(&mu_);
  state_.connected = false;
  state_.last_error = why;
}

void NriStats::ConnectFailed(const std::string& why) {
  MutexLock l(&mu_);
  state_.connected = false;
  ++state_.connect_failures;
  state_.last_error = why;
}

void NriStats::Configured(const std::string& runtime_name, const std::string& runtime_version) {
  MutexLock l(&mu_);
  state_.runtime_name = runtime_name;
  state_.runtime_version = runtime_version;
}

void NriStats::Decided(const std::string& action) {
  MutexLock l(&mu_);
  ++state_.decisions[action];
}

void NriStats::Refused() {
  MutexLock l(&mu_);
  ++state_.refusals;
}

void NriStats::Failed() {
  MutexLock l(&mu_);
  ++state_.failures;
}

void NriStats::Injected(const std::string& what, const std::string& outcome) {
  MutexLock l(&mu_);
  ++state_.injections[what + "/" + outcome];
}

void NriStats::CaughtUp(const std::string& outcome) {
  MutexLock l(&mu_);
  ++state_.late[outcome];
}

void NriStats::Abandoned() {
  MutexLock l(&mu_);
  ++state_.abandoned;
}

NriState NriStats::state() const {
  MutexLock l(&mu_);
  return state_;
}

}  // namespace shmkeeper
