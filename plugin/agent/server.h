// shmkeeperd's listeners, built from one options struct: gRPC on a unix
// socket (mode 0660) and optionally on TCP with TLS (mTLS with a client CA),
// standard health checking and reflection; HTTP /metrics, /healthz
// (CheckHealth), /readyz (the first scan is done), optionally over TLS (with
// client certificates) and with a bearer token for /metrics, behind the
// connection limits of http_guard.h. The liveness probe does not use HTTP:
// ProbeHealth asks over the unix socket, which untrusted clients cannot reach.
// /metrics also counts the runtime wrapper's and hook's decisions from the
// decision log (node/decision_tally.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "http_guard.h"
#include "node/engine.h"

namespace grpc {
class Server;
}
namespace httplib {
class Server;
}

namespace shmkeeper {
class DecisionTally;
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
// --probe): GetNode over agent.socket (root-only, so no neighbour can starve
// it), judged as CheckHealth judges: a scan finished recently, the event
// socket in place. Ok with "ok\n"; an error naming what failed. Without a
// unix socket: GET /healthz on agent.metricsAddress (a wildcard host is asked
// on loopback).
Result<std::string> ProbeHealth(const Config& config);

struct ServerOptions {
  std::string unix_socket = "/run/shmkeeper/agent.sock";  // "" = none
  std::string tcp_address;                                // "" = none; "host:0" picks a port
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  bool tcp_insecure = false;
  std::string metrics_address = "127.0.0.1:9731";  // "" = none; "host:0" picks a port
  HttpLimits http_limits;
  // HTTPS for the metrics listener when set (client certificates required when
  // metrics_client_ca_file is set too).
  std::string metrics_cert_file, metrics_key_file, metrics_client_ca_file;
  // /metrics needs "Authorization: Bearer <the file's content>" when set (read
  // per request, so a rotated token applies at once). /healthz and /readyz
  // stay open: they tell nothing about pods.
  std::string metrics_bearer_token_file;

  static ServerOptions FromConfig(const Config& config);
  // TCP with TLS that verifies client certificates: the only TCP listener on
  // which calls that change the node (ReclaimLeaks) are served.
  bool tcp_mtls() const { return !tcp_insecure && !tls_client_ca_file.empty(); }
  // One line for the start-up log when a TCP listener serves read-only calls
  // only ("" when there is none, or it is mTLS).
  std::string TcpReadOnlyNote() const;
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
  // The wrapper's and hook's decisions, from log.path (read at each scrape).
  std::unique_ptr<DecisionTally> tally_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<HttpGuard> guard_;  // outlives http_ (its task queue calls back)
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  int tcp_port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace shmkeeper::agent
