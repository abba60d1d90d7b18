// shmkeeper.v1.ShmKeeper: thin handlers that validate requests, call the
// Agent, and map results and errors to proto and gRPC status codes.
//
// Callers: the unix socket (root-only, mode 0660) may call everything. Over
// TCP, the calls that change the node (ReclaimLeaks; every other call only
// reads) need a client certificate verified against agent.tcp.clientCAFile;
// without it (insecure: true, or TLS without a client CA) they get
// PERMISSION_DENIED with one line of reason, counted in
// shmkeeper_grpc_calls_denied_total.
#pragma once

#include <atomic>
#include <cstdint>

#include "node/engine.h"
#include "shmkeeper/v1/agent.grpc.pb.h"

namespace shmkeeper::agent {

class ShmKeeperService final : public v1::ShmKeeper::Service {
 public:
  // `tcp_mtls`: the TCP listener (if any) verifies client certificates
  // against a client CA, so an authenticated TCP peer may change the node.
  ShmKeeperService(Agent* agent, bool tcp_mtls) : agent_(agent), tcp_mtls_(tcp_mtls) {}

  grpc::Status GetNode(grpc::ServerContext*, const v1::GetNodeRequest*, v1::GetNodeResponse*) override;
  grpc::Status ListPods(grpc::ServerContext*, const v1::ListPodsRequest*, v1::ListPodsResponse*) override;
  grpc::Status GetPod(grpc::ServerContext*, const v1::GetPodRequest*, v1::GetPodResponse*) override;
  grpc::Status ListLeaks(grpc::ServerContext*, const v1::ListLeaksRequest*, v1::ListLeaksResponse*) override;
  grpc::Status ReclaimLeaks(grpc::ServerContext*, const v1::ReclaimLeaksRequest*, v1::ReclaimLeaksResponse*) override;
  // At most agent.maxWatchStreams streams at once (each holds a server
  // thread); one more gets RESOURCE_EXHAUSTED at once. An admitted stream
  // sends its initial metadata as soon as it is subscribed.
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*, grpc::ServerWriter<v1::Event>*) override;

  int watch_streams() const { return watch_streams_.load(); }
  // Streams subscribed to the agent's events now (the gauge
  // shmkeeper_watch_streams): a stream counts from the moment no event can
  // pass it by, so a client or test can wait on it instead of on time.
  int watch_subscribed() const { return watch_subscribed_.load(); }
  // Calls that change the node refused for an unauthenticated TCP caller.
  int64_t reclaim_denied() const { return reclaim_denied_.load(); }

 private:
  // OK for a caller on the unix socket or an mTLS-verified TCP peer; else
  // PERMISSION_DENIED naming `method` and why, counted.
  grpc::Status AuthorizeChange(grpc::ServerContext* ctx, const char* method);

  Agent* agent_;  // not owned; outlives the service
  const bool tcp_mtls_;
  std::atomic<int64_t> reclaim_denied_{0};
  std::atomic<int> watch_streams_{0};     // admitted (the agent.maxWatchStreams cap)
  std::atomic<int> watch_subscribed_{0};  // subscribed
};

}  // namespace shmkeeper::agent
