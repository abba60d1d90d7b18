#include "service.h"

#include <charconv>

#include "config_file.h"
#include "convert.h"

namespace shmkeeper::agent {
namespace {

constexpr int32_t kMaxPageSize = 1000;

Result<size_t> PageOffset(const std::string& token) {
  if (token.empty()) return size_t{0};
  size_t v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc() || end != token.data() + token.size()) {
    return Status::Invalid("malformed page_token \"" + token + "\"");
  }
  return v;
}

}  // namespace

grpc::Status ShmKeeperService::AuthorizeChange(grpc::ServerContext* ctx, const char* method) {
  // The unix socket's peers are "unix:<path>"; TCP's "ipv4:" or "ipv6:".
  if (ctx->peer().starts_with("unix:")) return grpc::Status::OK;
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (tcp_mtls_ && auth && auth->IsPeerAuthenticated()) return grpc::Status::OK;
  reclaim_denied_.fetch_add(1);
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      std::string(method) +
                          " changes the node: over TCP it needs a client certificate verified against "
                          "agent.tcp.clientCAFile (mTLS); this listener serves read-only calls only");
}

grpc::Status ShmKeeperService::GetNode(grpc::ServerContext*, const v1::GetNodeRequest*, v1::GetNodeResponse* resp) {
  std::shared_ptr<const NodeSnapshot> snap = agent_->Snapshot();
  if (!snap) return ToGrpc(Status::Precondition("the first scan has not finished"));
  ToProto(*snap, agent_->config(), resp->mutable_node());
  ConfigFileToProto(agent_->config_file_state(), resp->mutable_node()->mutable_config_file());
  if (NriState n = agent_->nri_stats().state(); !n.socket.empty()) {
    v1::NriPlugin* out = resp->mutable_node()->mutable_nri();
    out->set_socket(n.socket);
    out->set_connected(n.connected);
    out->set_runtime_name(n.runtime_name);
    out->set_runtime_version(n.runtime_version);
    out->set_last_error(n.last_error);
    out->set_connections(n.connections);
    out->set_refusals(n.refusals);
    out->set_failures(n.failures);
  }
  return grpc::Status::OK;
}

grpc::Status ShmKeeperService::ListPods(grpc::ServerContext*, const v1::ListPodsRequest* req,
                                        v1::ListPodsResponse* resp) {
  if (req->page_size() < 0 || req->page_size() > kMaxPageSize) {
    return ToGrpc(Status::Invalid("page_size " + std::to_string(req->page_size()) + " is outside 0.." +
                                  std::to_string(kMaxPageSize)));
  }
  Result<size_t> offset = PageOffset(req->page_token());
  if (!offset.ok()) return ToGrpc(offset.status());
  Result<std::vector<PodRecord>> pods = agent_->ListPods({req->namespace_(), req->selector(), req->only_with_leaks()});
  if (!pods.ok()) return ToGrpc(pods.status());
  size_t end =
      req->page_size() ? std::min(pods->size(), *offset + static_cast<size_t>(req->page_size())) : pods->size();
  for (size_t i = *offset; i < end; ++i) ToProto((*pods)[i], resp->add_pods());
  if (end < pods->size()) resp->set_next_page_token(std::to_string(end));
  return grpc::Status::OK;
}

grpc::Status ShmKeeperService::GetPod(grpc::ServerContext*, const v1::GetPodRequest* req, v1::GetPodResponse* resp) {
  Result<PodRecord> pod = agent_->FindPod(req->uid(), req->name(), req->container_id());
  if (!pod.ok()) return ToGrpc(pod.status());
  ToProto(*pod, resp->mutable_pod());
  return grpc::Status::OK;
}

grpc::Status ShmKeeperService::ListLeaks(grpc::ServerContext*, const v1::ListLeaksRequest* req,
                                         v1::ListLeaksResponse* resp) {
  if (!agent_->Ready()) return ToGrpc(Status::Precondition("the first scan has not finished"));
  for (const LeakRecord& l : agent_->ListLeaks(req->namespace_(), req->pod())) ToProto(l, resp->add_leaks());
  return grpc::Status::OK;
}

grpc::Status ShmKeeperService::ReclaimLeaks(grpc::ServerContext* ctx, const v1::ReclaimLeaksRequest* req,
                                            v1::ReclaimLeaksResponse* resp) {
  if (grpc::Status denied = AuthorizeChange(ctx, "ReclaimLeaks"); !denied.ok()) return denied;
  bool dry_run = !req->has_dry_run() || req->dry_run();
  std::vector<std::string> paths(req->paths().begin(), req->paths().end());
  for (const std::string& p : paths) {
    if (p.empty() || p[0] != '/') return ToGrpc(Status::Invalid("path \"" + p + "\" is not absolute"));
  }
  // The client's deadline (gRPC's, on the calendar), on the agent's clock:
  // nothing is removed after the client saw DEADLINE_EXCEEDED.
  Clock* clock = agent_->clock();
  Deadline deadline = Deadline::max();
  if (auto left = ctx->deadline() - std::chrono::system_clock::now(); left < std::chrono::hours(24 * 365)) {
    deadline = clock->Now() + std::chrono::duration_cast<Deadline::duration>(left);
  }
  Result<ReclaimOutcome> out = agent_->Reclaim(dry_run, req->namespace_(), req->pod(), paths, deadline);
  if (clock->Now() >= deadline) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed: files not yet removed were kept");
  }
  if (!out.ok()) return ToGrpc(out.status());
  resp->set_dry_run(dry_run);
  for (const LeakRecord& l : out->reclaimed) ToProto(l, resp->add_reclaimed());
  for (const SkippedLeak& k : out->skipped) ToProto(k, resp->add_skipped());
  resp->set_freed_bytes(out->freed_bytes);
  return grpc::Status::OK;
}

grpc::Status ShmKeeperService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                     grpc::ServerWriter<v1::Event>* writer) {
  const int cap = agent_->config().agent.max_watch_streams;
  if (watch_streams_.fetch_add(1) >= cap) {
    watch_streams_.fetch_sub(1);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the agent serves " + std::to_string(cap) + " Watch streams already (agent.maxWatchStreams)");
  }
  struct Release {
    std::atomic<int>* n;
    ~Release() { n->fetch_sub(1); }
  } release{&watch_streams_};
  std::unique_ptr<EventHub::Subscription> sub = agent_->events().Subscribe();
  watch_subscribed_.fetch_add(1);
  Release unsubscribed{&watch_subscribed_};  // destroyed before `sub`: never counted while unsubscribed
  // The stream's headers go out once the subscription exists: a client that
  // waits for them (ClientReader::WaitForInitialMetadata) misses no event
  // after that, whether or not one follows soon.
  writer->SendInitialMetadata();
  while (!ctx->IsCancelled()) {
    for (const AgentEvent& e : sub->Next(std::chrono::milliseconds(500))) {
      if (!req->namespace_().empty() && e.pod.ns != req->namespace_()) continue;
      v1::Event pe;
      ToProto(e, &pe);
      if (!writer->Write(pe)) return grpc::Status::OK;
    }
  }
  return grpc::Status::OK;
}

}  // namespace shmkeeper::agent
