// The agent's CRI client: lists pod sandboxes over a containerd or CRI-O
// socket, with their labels (for every scan) and their memory limits (for
// agent-only mode's `shm.default: auto`).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "node/reconcile.h"

namespace shmkeeper::agent {

// `endpoint` is "unix:///path" or "/path". Thread-compatible: one caller.
class CriClient {
 public:
  explicit CriClient(const std::string& endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(2));
  ~CriClient();
  // Every sandbox the runtime knows. A ready sandbox's memory limit comes from
  // a verbose PodSandboxStatus, asked once per sandbox and remembered.
  Result<std::vector<CriSandbox>> ListSandboxes();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmkeeper::agent
