// GetPod latency from the agent's snapshot: N calls on one channel over the
// agent's unix socket; prints p50/p99/max in microseconds.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "shmkeeper/v1/agent.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: getpod_latency SOCKET POD_NAME N\n");
    return 2;
  }
  auto stub = shmkeeper::v1::ShmKeeper::NewStub(
      grpc::CreateChannel(std::string("unix://") + argv[1], grpc::InsecureChannelCredentials()));
  shmkeeper::v1::GetPodRequest req;
  req.set_name(argv[2]);
  int n = std::atoi(argv[3]);
  std::vector<double> us;
  for (int i = 0; i < n + 50; ++i) {
    grpc::ClientContext ctx;
    shmkeeper::v1::GetPodResponse resp;
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = stub->GetPod(&ctx, req, &resp);
    auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "GetPod: %s\n", s.error_message().c_str());
      return 1;
    }
    if (i >= 50) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());  // after warm-up
  }
  std::sort(us.begin(), us.end());
  std::printf("p50_us %.1f p99_us %.1f max_us %.1f\n", us[us.size() / 2], us[us.size() * 99 / 100], us.back());
  return 0;
}
