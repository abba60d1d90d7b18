#include "agent_client.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <iostream>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "base/json.h"

namespace shmkeeper::cli {

void AgentFlags::Add(CLI::App* cmd, bool with_output) {
  cmd->add_option("--agent", agent, "Agent address: unix:///path, /path or host:port")->capture_default_str();
  cmd->add_option("--tls-ca", tls_ca, "CA certificate (PEM) to verify a TCP agent");
  cmd->add_option("--tls-cert", tls_cert, "Client certificate (PEM) for mTLS");
  cmd->add_option("--tls-key", tls_key, "Client key (PEM) for mTLS");
  cmd->add_flag("--insecure", insecure, "Plaintext TCP (only for an agent configured with tcp.insecure)");
  if (!with_output) return;
  cmd->add_option("-o,--output", output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

Result<std::unique_ptr<v1::ShmKeeper::Stub>> Connect(const AgentFlags& f) {
  std::string target = f.agent;
  if (target.starts_with("/")) target = "unix://" + target;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (target.starts_with("unix:")) {
    creds = grpc::InsecureChannelCredentials();
  } else if (f.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    if (f.tls_ca.empty()) {
      return Status::Invalid("--agent " + f.agent + " is TCP: give --tls-ca (TLS) or --insecure");
    }
    grpc::SslCredentialsOptions ssl;
    SHMK_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(f.tls_ca));
    if (!f.tls_cert.empty()) {
      SHMK_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile(f.tls_cert));
      SHMK_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(f.tls_key));
    }
    creds = grpc::SslCredentials(ssl);
  }
  // gRPC refuses a reply over 4 MiB by default: `leaks` on a node with
  // 20,000 leaked files is ~5.8 MiB. The agent is who the user chose to ask;
  // its replies are bounded by the node's files, not by this limit.
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxAgentReply);
  return v1::ShmKeeper::NewStub(grpc::CreateCustomChannel(target, creds, args));
}

Status RpcError(const AgentFlags& f, const grpc::Status& s) {
  std::string msg = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status::Internal("cannot reach the agent at " + f.agent + " (is shmkeeperd running?): " + msg);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return Status::Invalid(msg);
    case grpc::StatusCode::NOT_FOUND:
      return Status::NotFound(msg);
    default:
      return Status::Internal("agent at " + f.agent + ": " + msg);
  }
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

Status PrintJson(const google::protobuf::Message& msg, int indent) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;  // zeros and empty strings too: scripts never meet a missing key
  auto st = google::protobuf::util::MessageToJsonString(msg, &out, opts);
  if (!st.ok()) return Status::Internal("JSON: " + std::string(st.message()));
  Json doc = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Status::Internal("JSON: the message did not print as an object");
  Json versioned = {{"schemaVersion", kJsonSchemaVersion}};
  versioned.update(doc);
  std::cout << DumpJson(versioned, indent) << "\n";
  return Status::Ok();
}

std::string KindName(v1::PodKind k) {
  std::string s = v1::PodKind_Name(k).substr(9);  // POD_KIND_
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string SkipReasonWord(v1::SkipReason r) {
  std::string s = v1::SkipReason_Name(r).substr(12);  // SKIP_REASON_
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string SkipText(const v1::SkippedLeak& k) {
  if (k.kind() == v1::SKIP_REASON_UNSPECIFIED) return k.reason();
  return SkipReasonWord(k.kind()) + ": " + k.message();
}

std::string PodName(const std::string& ns, const std::string& name) { return ns.empty() ? name : ns + "/" + name; }

std::string Iec(int64_t bytes) { return bytes <= 0 ? "0" : FormatSize(bytes); }

}  // namespace shmkeeper::cli
