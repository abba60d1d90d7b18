// shmkeeperd's listeners, built from one options struct: gRPC on a unix
// socket (mode 0660) and optionally on TCP with TLS (mTLS with a client CA),
// standard health checking and reflection; HTTP /metrics, /healthz (liveness:
// CheckHealth), /readyz (the first scan is done).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "node/engine.h"

namespace grpc {
class Server;
}
namespace httplib {
class Server;
}

namespace shmkeeper::agent {

class ShmKeeperService;

// The agent's liveness: empty `problems` when its scan loop finished a scan
// within 3 scan intervals + 30 s of `now`, its gRPC unix socket accepts
// connections and its event socket (if configured) is still in place.
struct HealthReport {
  std::vector<std::string> problems;
  bool ok() const { return problems.empty(); }
  std::string Text() const;  // "ok\n", or one problem per line
};
HealthReport CheckHealth(const Agent& agent, const std::string& unix_socket, std::chrono::system_clock::time_point now);

// The liveness probe of a running agent configured by `config` (shmkeeperd
// --probe): GET /healthz on agent.metricsAddress (a wildcard host is asked on
// loopback), or, without metrics, a connection to agent.socket. Ok with the
// agent's answer; an error naming what failed.
Result<std::string> ProbeHealth(const Config& config);

struct ServerOptions {
  std::string unix_socket = "/run/shmkeeper/agent.sock";  // "" = none
  std::string tcp_address;                                // "" = none; "host:0" picks a port
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  bool tcp_insecure = false;
  std::string metrics_address = "0.0.0.0:9731";  // "" = none; "host:0" picks a port

  static ServerOptions FromConfig(const Config& config);
};

class AgentServer {
 public:
  AgentServer(Agent* agent, ServerOptions options);
  ~AgentServer();

  // Starts every listener; on error nothing is left listening.
  Status Start();
  void Shutdown();
  int tcp_port() const { return tcp_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  Status StartHttp();
  Agent* agent_;
  ServerOptions opts_;
  std::unique_ptr<ShmKeeperService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  int tcp_port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace shmkeeper::agent
