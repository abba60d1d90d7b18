// Connecting the CLI to shmkeeperd, and printing its answers.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "cli.h"
#include "shmkeeper/v1/agent.grpc.pb.h"

namespace shmkeeper::cli {

inline constexpr const char* kDefaultAgent = "unix:///run/shmkeeper/agent.sock";

// Options every agent verb takes.
struct AgentFlags {
  std::string agent = kDefaultAgent;  // unix:///path, /path, or host:port
  std::string tls_ca;                 // CA for a TCP agent (TLS); required for TCP unless --insecure
  std::string tls_cert, tls_key;      // client certificate for mTLS
  bool insecure = false;              // plaintext TCP
  std::string output = "table";       // table or json

  // Adds the flags to `cmd`; -o/--output only when `with_output`.
  void Add(CLI::App* cmd, bool with_output = true);
};

// The largest reply the CLI accepts from the agent (gRPC's default is 4 MiB).
inline constexpr int kMaxAgentReply = 1 << 30;

// A stub for the agent at `flags.agent`, or a usage error. Replies up to
// kMaxAgentReply are accepted.
Result<std::unique_ptr<v1::ShmKeeper::Stub>> Connect(const AgentFlags& flags);

// A failed RPC as a Status that names the agent address.
Status RpcError(const AgentFlags& flags, const grpc::Status& s);

// Sets a deadline for unary calls.
void SetDeadline(grpc::ClientContext* ctx);

// Prints `msg` as protobuf's canonical JSON (camelCase keys, every field
// printed, zeros included), after "schemaVersion" (kJsonSchemaVersion), then
// a newline; indent -1: the whole document on that one line (JSON Lines).
Status PrintJson(const google::protobuf::Message& msg, int indent = 2);

std::string Iec(int64_t bytes);

// "kubernetes", "compose", "container", "host" (the enum's name without POD_KIND_, lower case).
std::string KindName(v1::PodKind k);
// "held", "opened", ... (SKIP_REASON_HELD -> held), the agent's word and metric label.
std::string SkipReasonWord(v1::SkipReason r);
// "<word>: <message>"; from an agent older than SkippedLeak.kind, its reason text.
std::string SkipText(const v1::SkippedLeak& k);

// "namespace/name", or "name" when the namespace is empty.
std::string PodName(const std::string& ns, const std::string& name);

}  // namespace shmkeeper::cli
