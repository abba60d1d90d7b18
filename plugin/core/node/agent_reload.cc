// Agent::Reload and the policy file's state: the agent's half of a SIGHUP.
#include <algorithm>
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

// Keys whose value ConfigToJson does not show (it names a file's presence,
// not its path), compared here so that a changed path is reported too.
std::vector<std::pair<std::string, std::string>> HiddenKeys(const Config& c) {
  return {{"agent.tcp.certFile", c.agent.tcp.cert_file},
          {"agent.tcp.keyFile", c.agent.tcp.key_file},
          {"agent.tcp.clientCAFile", c.agent.tcp.client_ca_file},
          {"agent.metrics.certFile", c.agent.metrics.cert_file},
          {"agent.metrics.keyFile", c.agent.metrics.key_file},
          {"agent.metrics.clientCAFile", c.agent.metrics.client_ca_file},
          {"agent.metrics.bearerTokenFile", c.agent.metrics.bearer_token_file}};
}

// The keys whose value in `next` the agent did not take into `applied`: what
// it reads only at start. Derived from what Reload copies, so a key added to
// Config later is reported until Reload applies it.
std::vector<std::string> NotApplied(const Config& applied, const Config& next) {
  std::map<std::string, nlohmann::json> have, want;
  Flatten(ConfigToJson(applied), "", &have);
  Flatten(ConfigToJson(next), "", &want);
  std::vector<std::string> keys;
  for (const auto& [key, value] : want) {
    if (have[key] != value) keys.push_back(key);
  }
  std::vector<std::pair<std::string, std::string>> h = HiddenKeys(applied), w = HiddenKeys(next);
  for (size_t i = 0; i < w.size(); ++i) {
    if (h[i].second != w[i].second && std::find(keys.begin(), keys.end(), w[i].first) == keys.end()) {
      keys.push_back(w[i].first);
    }
  }
  return keys;
}

}  // namespace

Config Agent::config() const {
  MutexLock l(&cfg_mu_);
  return config_;
}

std::vector<std::string> Agent::Reload(const Config& next) {
  std::vector<std::string> restart;
  MutexLock scan_lock(&scan_mu_);  // lock order: scan_mu_, cfg_mu_
  {
    MutexLock l(&cfg_mu_);
    Config applied = config_;  // what only a restart changes stays as it runs
    applied.shm = next.shm;
    applied.on_internal_error = next.on_internal_error;
    applied.runtime = next.runtime;
    applied.log = next.log;
    applied.inject = next.inject;
    applied.preload = next.preload;
    applied.cuda = next.cuda;
    applied.leaks.reclaim = next.leaks.reclaim;
    applied.agent.scan_interval = next.agent.scan_interval;
    applied.source = next.source;
    restart = NotApplied(applied, next);
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
