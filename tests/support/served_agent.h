// The agent of the RPC tests, served for real in-process: an Agent that
// watches <dir>/shm (mode 0777, made here; no runtime roots, no Docker),
// scans only on demand with leaks.grace 0, behind an AgentServer on
// <dir>/agent.sock, and a client stub for it. Not thread-safe: one per test
// fixture.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>

#include "node/engine.h"
#include "server.h"
#include "shmkeeper/v1/agent.grpc.pb.h"

namespace shmkeeper::test {

struct ServedAgent {
  // Members go in reverse order: the stub and channel, the server, then the
  // agent it serves.
  std::unique_ptr<Agent> agent;
  std::unique_ptr<agent::AgentServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ShmKeeper::Stub> stub;

  // Starts the agent on `config` (its scan interval and grace set here, so
  // the caller's copy says what the agent runs with; every other field is
  // the caller's) and the server, with `metrics_address` ("" for no HTTP).
  ::testing::AssertionResult Start(Config* config, const std::string& dir, const std::string& metrics_address) {
    const std::string shm = dir + "/shm", socket = dir + "/agent.sock";
    if (::mkdir(shm.c_str(), 0777) != 0) return ::testing::AssertionFailure() << "mkdir " << shm;
    config->agent.scan_interval = std::chrono::hours(1);  // scans only on demand
    config->leaks.grace = std::chrono::seconds(0);
    ScanOptions scan;
    scan.runtime_roots = {dir + "/no-runtime"};
    scan.docker_socket = "";
    scan.host_shm_dirs = {shm};
    scan.grace = config->leaks.grace;
    agent = std::make_unique<Agent>(*config, scan);
    if (Status s = agent->Start(); !s.ok()) return ::testing::AssertionFailure() << "agent: " << s.message();
    agent::ServerOptions opts;
    opts.unix_socket = socket;
    opts.metrics_address = metrics_address;
    server = std::make_unique<agent::AgentServer>(agent.get(), opts);
    if (Status s = server->Start(); !s.ok()) return ::testing::AssertionFailure() << "server: " << s.message();
    channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
    stub = v1::ShmKeeper::NewStub(channel);
    return ::testing::AssertionSuccess();
  }

  // The server first, then the agent.
  void Stop() {
    stub.reset();
    channel.reset();
    server.reset();
    agent.reset();
  }
};

}  // namespace shmkeeper::test
