// Core types <-> shmkeeper.v1 messages, and Status <-> grpc::Status.
#pragma once

#include <grpcpp/grpcpp.h>

#include "node/engine.h"
#include "shmkeeper/v1/agent.pb.h"

namespace shmkeeper::agent {

grpc::Status ToGrpc(const Status& s);
void ToProto(const PodRecord& in, v1::Pod* out);
void ToProto(const LeakRecord& in, v1::Leak* out);
// kind and message, and reason = "<word>: <message>" for older clients.
void ToProto(const SkippedLeak& in, v1::SkippedLeak* out);
void ToProto(const AgentEvent& in, v1::Event* out);
void ToProto(const NodeSnapshot& in, const Config& config, v1::Node* out);

}  // namespace shmkeeper::agent
