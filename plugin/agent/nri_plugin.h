// The agent as an NRI plugin (agent.nri.socket): a thread that connects to
// the runtime's NRI socket, runs a session (nri_session.h) and, when the
// runtime goes away (a restart), connects again with a backoff (0.5 s
// doubling to 10 s). Each CreateContainer is decided by nri_decide.h with the
// running policy; a refusal fails the container with the wrapper's line, an
// internal failure is counted and answered per onInternalError (no
// adjustment, or refused under `fail`). At each registration the runtime's
// Synchronize catches up the pods it created while the agent was away
// (nri_catchup.h): resized late, counted and logged.
//
// Thread-safety: Start and Stop from one thread; the handler runs on the
// plugin's thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/os.h"
#include "decide/config.h"
#include "node/nri_stats.h"
#include "nri_mountns.h"
#include "nri_session.h"

namespace shmkeeper::agent {

class NriPlugin : public NriHandler {
 public:
  using ConfigFn = std::function<Config()>;
  using LogFn = std::function<void(const char* level, const std::string& msg)>;
  // `stats` and `os` outlive the plugin.
  NriPlugin(std::string socket, NriSessionOptions options, ConfigFn config, Os* os, NriStats* stats, LogFn log);
  ~NriPlugin() override;

  void Start();
  // Ends the session (if any) and the thread; returns when it has ended.
  void Stop();

  void Configured(const ::nri::pkg::api::v1alpha1::ConfigureRequest& req) override;
  Result<::nri::pkg::api::v1alpha1::CreateContainerResponse> CreateContainer(
      const ::nri::pkg::api::v1alpha1::CreateContainerRequest& req) override;
  // Catches up the pods created while the agent was away (nri_catchup.h).
  void Synchronized(const ::nri::pkg::api::v1alpha1::SynchronizeRequest& all) override;
  void Abandoned(const ::nri::pkg::api::v1alpha1::CreateContainerRequest& req) override;

 private:
  void Loop();
  // The wrapper's injection as the adjustment (nri_rootfs.h), counted and logged.
  ::nri::pkg::api::v1alpha1::ContainerAdjustment Inject(const ::nri::pkg::api::v1alpha1::CreateContainerRequest& req,
                                                        const Config& config, const std::string& who);
  // Connects to socket_; the fd, or why not.
  Result<int> Connect();
  // Waits `d` or until Stop; returns false when stopping.
  bool Sleep(std::chrono::milliseconds d);

  const std::string socket_;
  const NriSessionOptions options_;
  const ConfigFn config_;
  Os* const os_;
  NriStats* const stats_;
  const LogFn log_;

  // The runtime's mount namespace, for the connection in progress (the
  // plugin's thread only).
  std::unique_ptr<RuntimeMountNsOs> runtime_os_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  int fd_ = -1;            // guarded by mu_: the session's, for Stop's shutdown(2)
  std::thread thread_;
};

}  // namespace shmkeeper::agent
