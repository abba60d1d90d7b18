// cri-tool: plays the kubelet against a CRI socket for the tests (Debian has
// no crictl). Requests are the CRI messages in protobuf's JSON, as crictl
// takes them:
//   cri-tool -r unix:///sock version
//   cri-tool -r SOCK runp POD.json [HANDLER]          -> sandbox id
//   cri-tool -r SOCK create POD_ID CONTAINER.json POD.json -> container id
//   cri-tool -r SOCK start|stop|rm ID ; stopp|rmp POD_ID
//   cri-tool -r SOCK exec ID CMD...                   -> stdout; exit = its exit code
//   cri-tool -r SOCK pods|ps                          -> JSON
//   cri-tool -r SOCK inspect ID                       -> ContainerStatus JSON (state, exitCode)
// gRPC errors print "cri-tool: <CODE>: <message>" and exit 1.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cri/runtime_v1.grpc.pb.h"

namespace {

namespace cri = runtime::v1;
using Args = std::vector<std::string>;

[[noreturn]] void Die(const std::string& msg, int code = 2) {
  std::cerr << "cri-tool: " << msg << "\n";
  std::exit(code);
}

template <typename M>
M FromJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Die("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  M msg;
  auto st = google::protobuf::util::JsonStringToMessage(ss.str(), &msg);
  if (!st.ok()) Die(path + ": " + st.ToString());
  return msg;
}

template <typename M>
void PrintJson(const M& msg) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(msg, &out);
  std::cout << out << "\n";
}

void Check(const grpc::Status& s) {
  if (!s.ok()) Die(std::to_string(s.error_code()) + ": " + s.error_message(), 1);
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 120) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

void Need(const Args& a, size_t n, const char* usage) {
  if (a.size() < n) Die(std::string("usage: ") + usage);
}

int Run(cri::RuntimeService::Stub& rt, const std::string& verb, const Args& a) {
  if (verb == "version") {
    cri::VersionResponse r;
    Check(rt.Version(Ctx(10).get(), cri::VersionRequest(), &r));
    PrintJson(r);
  } else if (verb == "runp") {
    Need(a, 1, "runp POD.json [HANDLER]");
    cri::RunPodSandboxRequest req;
    *req.mutable_config() = FromJsonFile<cri::PodSandboxConfig>(a[0]);
    if (a.size() > 1) req.set_runtime_handler(a[1]);
    cri::RunPodSandboxResponse r;
    Check(rt.RunPodSandbox(Ctx().get(), req, &r));
    std::cout << r.pod_sandbox_id() << "\n";
  } else if (verb == "create") {
    Need(a, 3, "create POD_ID CONTAINER.json POD.json");
    cri::CreateContainerRequest req;
    req.set_pod_sandbox_id(a[0]);
    *req.mutable_config() = FromJsonFile<cri::ContainerConfig>(a[1]);
    *req.mutable_sandbox_config() = FromJsonFile<cri::PodSandboxConfig>(a[2]);
    cri::CreateContainerResponse r;
    Check(rt.CreateContainer(Ctx().get(), req, &r));
    std::cout << r.container_id() << "\n";
  } else if (verb == "start" || verb == "stop" || verb == "rm") {
    Need(a, 1, "start|stop|rm ID");
    if (verb == "start") {
      cri::StartContainerRequest req;
      req.set_container_id(a[0]);
      cri::StartContainerResponse r;
      Check(rt.StartContainer(Ctx().get(), req, &r));
    } else if (verb == "stop") {
      cri::StopContainerRequest req;
      req.set_container_id(a[0]);
      cri::StopContainerResponse r;
      Check(rt.StopContainer(Ctx().get(), req, &r));
    } else {
      cri::RemoveContainerRequest req;
      req.set_container_id(a[0]);
      cri::RemoveContainerResponse r;
      Check(rt.RemoveContainer(Ctx().get(), req, &r));
    }
  } else if (verb == "stopp" || verb == "rmp") {
    Need(a, 1, "stopp|rmp POD_ID");
    if (verb == "stopp") {
      cri::StopPodSandboxRequest req;
      req.set_pod_sandbox_id(a[0]);
      cri::StopPodSandboxResponse r;
      Check(rt.StopPodSandbox(Ctx().get(), req, &r));
    } else {
      cri::RemovePodSandboxRequest req;
      req.set_pod_sandbox_id(a[0]);
      cri::RemovePodSandboxResponse r;
      Check(rt.RemovePodSandbox(Ctx().get(), req, &r));
    }
  } else if (verb == "exec") {
    Need(a, 2, "exec ID CMD...");
    cri::ExecSyncRequest req;
    req.set_container_id(a[0]);
    for (size_t i = 1; i < a.size(); ++i) req.add_cmd(a[i]);
    req.set_timeout(60);
    cri::ExecSyncResponse r;
    Check(rt.ExecSync(Ctx(90).get(), req, &r));
    std::cout << r.stdout();
    std::cerr << r.stderr();
    return r.exit_code();
  } else if (verb == "inspect") {
    Need(a, 1, "inspect ID");
    cri::ContainerStatusRequest req;
    req.set_container_id(a[0]);
    cri::ContainerStatusResponse r;
    Check(rt.ContainerStatus(Ctx(10).get(), req, &r));
    PrintJson(r);
  } else if (verb == "pods") {
    cri::ListPodSandboxResponse r;
    Check(rt.ListPodSandbox(Ctx(10).get(), cri::ListPodSandboxRequest(), &r));
    PrintJson(r);
  } else if (verb == "ps") {
    cri::ListContainersResponse r;
    Check(rt.ListContainers(Ctx(10).get(), cri::ListContainersRequest(), &r));
    PrintJson(r);
  } else {
    Die("unknown verb " + verb);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argv + 1, argv + argc);
  if (args.size() < 3 || args[0] != "-r") Die("usage: cri-tool -r unix:///SOCKET VERB [ARGS...]");
  auto channel = grpc::CreateChannel(args[1], grpc::InsecureChannelCredentials());
  auto stub = cri::RuntimeService::NewStub(channel);
  return Run(*stub, args[2], Args(args.begin() + 3, args.end()));
}
