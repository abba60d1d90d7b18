// The agent's CRI client: lists pod sandboxes over a containerd or CRI-O
// socket (agent-only mode).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "shmkeeper/reconcile.h"
#include "shmkeeper/status.h"

namespace shmkeeper::agent {

// `endpoint` is "unix:///path" or "/path". Thread-compatible: one caller.
class CriClient {
 public:
  explicit CriClient(const std::string& endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(2));
  ~CriClient();
  Result<std::vector<CriSandbox>> ListSandboxes();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmkeeper::agent
