// What `shmkeeper install docker` reads of a running dockerd: the API socket
// it listens on, and its answer to `docker info --format '{{json .}}'`.
// Pure functions over text: the caller reads the files and runs the CLI.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

inline constexpr const char* kDockerDefaultSocket = "/var/run/docker.sock";

// The unix socket of a dockerd: from its -H/--host flags (`argv`, its command
// line), else from "hosts" in its daemon.json (`daemon_json_text`; dockerd
// refuses both at once), else the default /var/run/docker.sock (also for
// systemd's fd://). The first unix:// address wins ("unix://" alone is the
// default socket). kNotFound when it listens only on other addresses
// (tcp://: no way to check it without its TLS client files); kInvalidArgument
// when daemon.json is not JSON or "hosts" is not a list of strings.
Result<std::string> DockerdApiSocket(const std::vector<std::string>& argv, const std::string& daemon_json_text);

struct DockerInfo {
  std::string server_version;         // ServerVersion
  std::string default_runtime;        // DefaultRuntime
  std::vector<std::string> runtimes;  // Runtimes keys
};

// Parses the docker CLI's `info --format '{{json .}}'` output. An answer is a
// JSON object with a non-empty ServerVersion and no ServerErrors: the docker
// CLI of Docker 22.06 and later exits 0 when it cannot reach the daemon and
// puts the error in ServerErrors (with an otherwise empty server part), so
// an exit status of 0 alone says nothing. Not OK: one line naming what the
// CLI said instead.
Result<DockerInfo> ParseDockerInfo(const std::string& text);

}  // namespace shmkeeper
