// One connection of the agent, as an NRI plugin, to the runtime's NRI socket:
// registers (RegisterPlugin on the runtime's service), answers the runtime's
// calls on the plugin service (Configure subscribes to CreateContainer only;
// Synchronize is answered with no update, then handed to the handler whole;
// Shutdown and anything else are answered empty) until the runtime closes the
// connection or asks the plugin to shut down.
//
// A CreateContainer read after the runtime closed its end (it gave up
// waiting: its plugin request timeout, e.g. the agent was stopped) is not
// decided: the runtime created the container without the plugin, and sizing
// it now would be a late resize recorded as a timely one. It goes to
// Abandoned instead; the next connection's Synchronize catches the pod up.
//
// The framing is core/nri/wire.h; the messages are containerd/nri's
// pkg/api/api.proto and ttrpc's envelopes (proto/nri/). Every call is
// answered on the session's one thread, in order; a decision is computed
// before its answer is written.
//
// Thread-safety: RunSession blocks its caller; another thread ends it early by
// shutdown(2) of the fd.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "base/status.h"
#include "nri_api.h"

namespace shmkeeper::agent {

// What the session asks of its owner. Called on the session's thread.
class NriHandler {
 public:
  virtual ~NriHandler() = default;
  // The runtime registered us; its name and version (Configure).
  virtual void Configured(const ::nri::pkg::api::v1alpha1::ConfigureRequest& req) = 0;
  // The answer to CreateContainer; a non-OK status is answered as the
  // call's error (the runtime fails the container with its message).
  virtual Result<::nri::pkg::api::v1alpha1::CreateContainerResponse> CreateContainer(
      const ::nri::pkg::api::v1alpha1::CreateContainerRequest& req) = 0;
  // The runtime's pods and containers at registration (every Synchronize
  // chunk merged), called after the answer was written: the runtime is not
  // kept waiting while the handler works.
  virtual void Synchronized(const ::nri::pkg::api::v1alpha1::SynchronizeRequest& all) = 0;
  // A CreateContainer the runtime stopped waiting for (see above).
  virtual void Abandoned(const ::nri::pkg::api::v1alpha1::CreateContainerRequest& req) = 0;
};

struct NriSessionOptions {
  std::string name = "shmkeeper";  // RegisterPluginRequest.plugin_name
  std::string index = "10";        // plugin_idx: two digits
  // How long the runtime may take to answer RegisterPlugin.
  std::chrono::milliseconds registration_timeout{5000};
};

inline constexpr const char* kNriPluginService = "nri.pkg.api.v1alpha1.Plugin";
inline constexpr const char* kNriRuntimeService = "nri.pkg.api.v1alpha1.Runtime";

// Runs one connection over `fd` (a connected unix socket; not closed here).
// `on_registered` is called once the runtime accepted the registration.
// Returns why the session ended: the runtime closed it or asked for Shutdown
// (kFailedPrecondition, "...closed..."), refused the registration, sent
// bytes that are not NRI, or an I/O error.
Status RunNriSession(int fd, const NriSessionOptions& options, NriHandler& handler,
                     const std::function<void()>& on_registered);

}  // namespace shmkeeper::agent
