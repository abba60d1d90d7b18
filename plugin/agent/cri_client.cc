#include "cri_client.h"

#include <grpcpp/grpcpp.h>

#include "cri/runtime_v1.grpc.pb.h"

namespace shmkeeper::agent {

struct CriClient::Impl {
  std::string endpoint;
  std::chrono::milliseconds timeout;
  std::unique_ptr<runtime::v1::RuntimeService::Stub> stub;
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
  for (const runtime::v1::PodSandbox& p : resp.items()) {
    CriSandbox sb;
    sb.id = p.id();
    sb.ns = p.metadata().namespace_();
    sb.name = p.metadata().name();
    sb.uid = p.metadata().uid();
    sb.ready = p.state() == runtime::v1::SANDBOX_READY;
    sb.annotations.insert(p.annotations().begin(), p.annotations().end());
    out.push_back(std::move(sb));
  }
  return out;
}

}  // namespace shmkeeper::agent
