#include "cri_client.h"

#include <grpcpp/grpcpp.h>

#include "cri/runtime_v1.grpc.pb.h"

namespace shmkeeper::agent {

struct CriClient::Impl {
  std::string endpoint;
  std::chrono::milliseconds timeout;
  std::unique_ptr<runtime::v1::RuntimeService::Stub> stub;
  std::map<std::string, std::optional<MemoryLimit>> limits;  // by sandbox id: asked once

  // The sandbox's memory limit from a verbose PodSandboxStatus (nullopt when
  // the runtime does not tell; an error is asked again next time).
  Result<std::optional<MemoryLimit>> StatusLimit(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    runtime::v1::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(id);
    req.set_verbose(true);
    runtime::v1::PodSandboxStatusResponse resp;
    grpc::Status s = stub->PodSandboxStatus(&ctx, req, &resp);
    if (!s.ok()) return Status::Internal("CRI " + endpoint + ": PodSandboxStatus " + id + ": " + s.error_message());
    auto info = resp.info().find("info");
    if (info == resp.info().end()) return std::optional<MemoryLimit>();
    return MemoryLimitFromSandboxInfo(info->second);
  }

  std::optional<MemoryLimit> CachedLimit(const std::string& id) {
    if (auto it = limits.find(id); it != limits.end()) return it->second;
    Result<std::optional<MemoryLimit>> limit = StatusLimit(id);
    if (!limit.ok()) return std::nullopt;
    limits[id] = *limit;
    return *limit;
  }
};

CriClient::CriClient(const std::string& endpoint, std::chrono::milliseconds timeout) : impl_(new Impl) {
  impl_->endpoint = endpoint.starts_with("/") ? "unix://" + endpoint : endpoint;
  impl_->timeout = timeout;
  impl_->stub =
      runtime::v1::RuntimeService::NewStub(grpc::CreateChannel(impl_->endpoint, grpc::InsecureChannelCredentials()));
}

CriClient::~CriClient() = default;

Result<std::vector<CriSandbox>> CriClient::ListSandboxes() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + impl_->timeout);
  runtime::v1::ListPodSandboxResponse resp;
  grpc::Status s = impl_->stub->ListPodSandbox(&ctx, runtime::v1::ListPodSandboxRequest(), &resp);
  if (!s.ok()) return Status::Internal("CRI " + impl_->endpoint + ": " + s.error_message());
  std::vector<CriSandbox> out;
  std::map<std::string, std::optional<MemoryLimit>> live;
  for (const runtime::v1::PodSandbox& p : resp.items()) {
    CriSandbox sb;
    sb.id = p.id();
    sb.ns = p.metadata().namespace_();
    sb.name = p.metadata().name();
    sb.uid = p.metadata().uid();
    sb.ready = p.state() == runtime::v1::SANDBOX_READY;
    sb.labels.insert(p.labels().begin(), p.labels().end());
    sb.annotations.insert(p.annotations().begin(), p.annotations().end());
    if (sb.ready) {
      sb.memory_limit = impl_->CachedLimit(sb.id);
      if (auto it = impl_->limits.find(sb.id); it != impl_->limits.end()) live.insert(*it);
    }
    out.push_back(std::move(sb));
  }
  impl_->limits = std::move(live);  // sandboxes that are gone drop out
  return out;
}

}  // namespace shmkeeper::agent
