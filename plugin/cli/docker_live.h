// The running dockerd's view of its runtimes (`docker info`), to check that an
// install or uninstall took effect rather than trusting a reload.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper::cli {

struct DockerdLive {
  pid_t pid = 0;
  std::string socket;                 // its API unix socket (-H unix://..., default /var/run/docker.sock)
  std::string default_runtime;        // /info DefaultRuntime
  std::vector<std::string> runtimes;  // /info Runtimes keys
};

// Every running dockerd whose --config-file is `daemon_json`, as its API
// reports it now. A dockerd whose API does not answer is an error.
Result<std::vector<DockerdLive>> DockerdsUsing(const std::string& daemon_json);

// Polls (up to ~5 s: a reload is asynchronous) until every dockerd using
// `daemon_json` has (install) or has not (uninstall) `runtime` among its
// runtimes and, for `as_default`, as its default. Not OK: one line naming the
// dockerd, what it still runs, and the restart that applies the file.
Status VerifyDockerLive(const std::string& daemon_json, const std::string& runtime, bool install, bool as_default);

}  // namespace shmkeeper::cli
