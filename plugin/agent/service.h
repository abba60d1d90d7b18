// shmkeeper.v1.ShmKeeper: thin handlers that validate requests, call the
// Agent, and map results and errors to proto and gRPC status codes.
#pragma once

#include <atomic>

#include "node/engine.h"
#include "shmkeeper/v1/agent.grpc.pb.h"

namespace shmkeeper::agent {

class ShmKeeperService final : public v1::ShmKeeper::Service {
 public:
  explicit ShmKeeperService(Agent* agent) : agent_(agent) {}

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

 private:
  Agent* agent_;                          // not owned; outlives the service
  std::atomic<int> watch_streams_{0};     // admitted (the agent.maxWatchStreams cap)
  std::atomic<int> watch_subscribed_{0};  // subscribed
};

}  // namespace shmkeeper::agent
