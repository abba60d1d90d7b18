// Agent::Reload and the policy file's state: the agent's half of a SIGHUP.
#include <nlohmann/json.hpp>

#include "node/engine.h"

namespace shmkeeper {
namespace {

// Leaves of a ConfigToJson document as "a.b" -> value.
void Flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) Flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  (*out)[prefix] = j;
}

// Keys the agent reads only at start.
bool NeedsRestart(const std::string& key) {
  if (key == "agent.scanInterval") return false;
  return key.starts_with("agent.") || key == "leaks.grace";
}

}  // namespace

Config Agent::config() const {
  MutexLock l(&cfg_mu_);
  return config_;
}

std::vector<std::string> Agent::Reload(const Config& next) {
  std::map<std::string, nlohmann::json> before, after;
  std::vector<std::string> restart;
  MutexLock scan_lock(&scan_mu_);  // lock order: scan_mu_, cfg_mu_
  {
    MutexLock l(&cfg_mu_);
    Flatten(ConfigToJson(config_), "", &before);
    Flatten(ConfigToJson(next), "", &after);
    for (const auto& [key, value] : after) {
      if (key != "source" && NeedsRestart(key) && before[key] != value) restart.push_back(key);
    }
    Config applied = config_;  // what only a restart changes stays as it runs
    applied.shm = next.shm;
    applied.on_internal_error = next.on_internal_error;
    applied.runtime = next.runtime;
    applied.log = next.log;
    applied.inject = next.inject;
    applied.cuda = next.cuda;
    applied.leaks.reclaim = next.leaks.reclaim;
    applied.agent.scan_interval = next.agent.scan_interval;
    applied.source = next.source;
    config_ = std::move(applied);
  }
  loop_->SetInterval(next.agent.scan_interval);  // the loop waits again with the new interval
  return restart;
}

void Agent::SetConfigFileState(ConfigFileState state) {
  MutexLock l(&cfg_mu_);
  file_state_ = std::move(state);
}

ConfigFileState Agent::config_file_state() const {
  MutexLock l(&cfg_mu_);
  return file_state_;
}

}  // namespace shmkeeper
