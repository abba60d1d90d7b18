// shmkeeperd's listeners, built from one options struct: gRPC on a unix
// socket (mode 0660) and optionally on TCP with TLS (mTLS with a client CA),
// standard health checking and reflection; HTTP /metrics, /healthz, /readyz.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "shmkeeper/agent.h"
#include "shmkeeper/status.h"

namespace grpc {
class Server;
}
namespace httplib {
class Server;
}

namespace shmkeeper::agent {

class ShmKeeperService;

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
