// The agent as an NRI plugin, without a runtime: the framing (mux frames and
// ttrpc messages, their limits), one session against a scripted runtime over
// a socketpair (registration, Configure's subscription, a CreateContainer
// refused with the handler's line, Shutdown), and the /dev/shm decision on
// scripted facts (unit/fake_os.h). The real containerd drives it in
// tests/engines/test_nri.py.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "nri/ttrpc.pb.h"
#include "nri/wire.h"
#include "nri_decide.h"
#include "nri_session.h"
#include "unit/fake_os.h"

namespace shmkeeper::agent {
namespace {
namespace api = ::nri::pkg::api::v1alpha1;
using shmkeeper::nri::EncodeMessage;
using shmkeeper::nri::MessageType;
using shmkeeper::nri::TtrpcMessage;
using shmkeeper::nri::WireReader;

constexpr int64_t kMiB = 1 << 20;

TEST(NriWire, ALargeMessageGoesInFramesTheRuntimeCanReadAndComesBackWhole) {
  TtrpcMessage m;
  m.conn = shmkeeper::nri::kPluginServiceConn;
  m.stream_id = 7;
  m.type = static_cast<uint8_t>(MessageType::kResponse);
  m.payload = std::string(10000, 'x');
  Result<std::string> bytes = EncodeMessage(m);
  ASSERT_TRUE(bytes.ok());
  // Three mux frames (10010 bytes of ttrpc stream, 4096 at most each).
  EXPECT_EQ(bytes->size(), 10010u + 3 * shmkeeper::nri::kMuxHeaderBytes);
  WireReader r;
  for (char c : *bytes) ASSERT_TRUE(r.Feed(std::string_view(&c, 1)).ok());  // byte by byte
  std::optional<TtrpcMessage> back = r.Next();
  ASSERT_TRUE(back);
  EXPECT_EQ(back->payload, m.payload);
  EXPECT_EQ(back->stream_id, 7u);
  EXPECT_EQ(back->conn, m.conn);
  EXPECT_FALSE(r.Next());
}

TEST(NriWire, OversizedLengthsAreErrorsAndUnknownConnectionsAreDropped) {
  WireReader r;
  std::string huge("\x00\x00\x00\x01\x7f\xff\xff\xff", 8);  // a 2 GiB mux frame
  EXPECT_FALSE(r.Feed(huge).ok());
  WireReader r2;
  // A ttrpc header announcing 5 MiB inside a small mux frame.
  std::string frame("\x00\x00\x00\x01\x00\x00\x00\x0a\x00\x50\x00\x00\x00\x00\x00\x01\x01\x00", 18);
  EXPECT_FALSE(r2.Feed(frame).ok());
  WireReader r3;
  TtrpcMessage m;
  m.conn = 9;
  m.payload = "abc";
  Result<std::string> bytes = EncodeMessage(m);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(r3.Feed(*bytes).ok());
  EXPECT_FALSE(r3.Next());  // control: the same message on connection 1 comes through
  m.conn = shmkeeper::nri::kPluginServiceConn;
  ASSERT_TRUE(r3.Feed(*EncodeMessage(m)).ok());
  EXPECT_TRUE(r3.Next());
}

// The runtime's side of a socketpair.
class ScriptedRuntime {
 public:
  explicit ScriptedRuntime(int fd) : fd_(fd) {}
  TtrpcMessage Read() {
    while (true) {
      if (std::optional<TtrpcMessage> m = reader_.Next()) return *m;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n <= 0) ADD_FAILURE() << "the plugin closed the connection";
      if (n <= 0) return {};
      EXPECT_TRUE(reader_.Feed(std::string_view(buf, static_cast<size_t>(n))).ok());
    }
  }
  void Write(uint32_t conn, uint32_t stream, MessageType type, const std::string& payload) {
    TtrpcMessage m;
    m.conn = conn;
    m.stream_id = stream;
    m.type = static_cast<uint8_t>(type);
    m.payload = payload;
    std::string bytes = *EncodeMessage(m);
    ASSERT_EQ(::write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  // Calls the plugin's method; its response.
  ttrpc::Response Call(uint32_t stream, const std::string& method, const std::string& payload) {
    ttrpc::Request req;
    req.set_service(kNriPluginService);
    req.set_method(method);
    req.set_payload(payload);
    Write(shmkeeper::nri::kPluginServiceConn, stream, MessageType::kRequest, req.SerializeAsString());
    TtrpcMessage m = Read();
    EXPECT_EQ(m.conn, shmkeeper::nri::kPluginServiceConn);
    EXPECT_EQ(m.stream_id, stream);
    EXPECT_EQ(m.type, static_cast<uint8_t>(MessageType::kResponse));
    ttrpc::Response resp;
    EXPECT_TRUE(resp.ParseFromString(m.payload));
    return resp;
  }

 private:
  int fd_;
  WireReader reader_;
};

class RefusingHandler : public NriHandler {
 public:
  std::string runtime;
  int creates = 0;
  void Configured(const api::ConfigureRequest& req) override { runtime = req.runtime_name(); }
  Result<api::CreateContainerResponse> CreateContainer(const api::CreateContainerRequest& req) override {
    ++creates;
    if (req.pod().annotations().contains("refuse")) return Status::Invalid("shmkeeper: refused here");
    return api::CreateContainerResponse();
  }
  void Synchronized(const api::SynchronizeRequest& all) override { synced.push_back(all); }
  void Abandoned(const api::CreateContainerRequest&) override { ++abandoned; }
  std::vector<api::SynchronizeRequest> synced;
  int abandoned = 0;
};

TEST(NriSession, RegistersSubscribesToCreateContainerAnswersAndEndsOnShutdown) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  RefusingHandler handler;
  bool registered = false;
  Status ended;
  std::thread plugin([&] { ended = RunNriSession(sv[0], NriSessionOptions{}, handler, [&] { registered = true; }); });
  ScriptedRuntime rt(sv[1]);

  TtrpcMessage reg = rt.Read();
  EXPECT_EQ(reg.conn, shmkeeper::nri::kRuntimeServiceConn);
  EXPECT_EQ(reg.stream_id, 1u);
  ttrpc::Request call;
  ASSERT_TRUE(call.ParseFromString(reg.payload));
  EXPECT_EQ(call.service(), kNriRuntimeService);
  EXPECT_EQ(call.method(), "RegisterPlugin");
  api::RegisterPluginRequest req;
  ASSERT_TRUE(req.ParseFromString(call.payload()));
  EXPECT_EQ(req.plugin_name(), "shmkeeper");
  EXPECT_EQ(req.plugin_idx(), "10");
  // The runtime configures before it answers the registration (either order works).
  api::ConfigureRequest cfg;
  cfg.set_runtime_name("containerd");
  ttrpc::Response cr = rt.Call(1, "Configure", cfg.SerializeAsString());
  EXPECT_EQ(cr.status().code(), 0);
  api::ConfigureResponse events;
  ASSERT_TRUE(events.ParseFromString(cr.payload()));
  EXPECT_EQ(events.events(), 1 << (api::CREATE_CONTAINER - 1));
  EXPECT_EQ(handler.runtime, "containerd");
  ttrpc::Response ok;
  rt.Write(shmkeeper::nri::kRuntimeServiceConn, 1, MessageType::kResponse, ok.SerializeAsString());

  api::SynchronizeRequest sync;
  sync.set_more(true);
  ttrpc::Response sr = rt.Call(3, "Synchronize", sync.SerializeAsString());
  api::SynchronizeResponse sresp;
  ASSERT_TRUE(sresp.ParseFromString(sr.payload()));
  EXPECT_TRUE(sresp.more());

  api::CreateContainerRequest create;
  (*create.mutable_pod()->mutable_annotations())["refuse"] = "1";
  ttrpc::Response refused = rt.Call(5, "CreateContainer", create.SerializeAsString());
  EXPECT_NE(refused.status().code(), 0);
  EXPECT_EQ(refused.status().message(), "shmkeeper: refused here");
  create.mutable_pod()->mutable_annotations()->erase("refuse");  // control: answered OK
  EXPECT_EQ(rt.Call(7, "CreateContainer", create.SerializeAsString()).status().code(), 0);
  EXPECT_EQ(handler.creates, 2);
  // A method nobody subscribed to: the empty answer; a foreign service: an error.
  EXPECT_EQ(rt.Call(9, "StopContainer", "").status().code(), 0);
  EXPECT_EQ(rt.Call(11, "Shutdown", "").status().code(), 0);
  plugin.join();
  EXPECT_TRUE(registered);
  EXPECT_NE(ended.message().find("shut down"), std::string::npos) << ended.message();
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(NriSession, ARefusedRegistrationEndsTheSessionWithTheRuntimesReason) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  RefusingHandler handler;
  Status ended;
  std::thread plugin([&] { ended = RunNriSession(sv[0], NriSessionOptions{}, handler, nullptr); });
  ScriptedRuntime rt(sv[1]);
  rt.Read();
  ttrpc::Response no;
  no.mutable_status()->set_code(9);
  no.mutable_status()->set_message("plugin 10-shmkeeper already registered");
  rt.Write(shmkeeper::nri::kRuntimeServiceConn, 1, MessageType::kResponse, no.SerializeAsString());
  plugin.join();
  EXPECT_NE(ended.message().find("already registered"), std::string::npos) << ended.message();
  ::close(sv[0]);
  ::close(sv[1]);
}

// A CreateContainer request as containerd's CRI sends it for a container of pod `pod_id`.
api::CreateContainerRequest Create(const std::string& pod_id, const std::string& shm_source, bool ipc_ns = true) {
  api::CreateContainerRequest req;
  req.mutable_pod()->set_id(pod_id);
  req.mutable_pod()->set_name("p");
  req.mutable_container()->set_id("c1");
  api::Mount* m = req.mutable_container()->add_mounts();
  m->set_destination("/dev/shm");
  m->set_type("bind");
  m->set_source(shm_source);
  m->add_options("rbind");
  m->add_options("rw");
  if (ipc_ns) req.mutable_container()->mutable_linux()->add_namespaces()->set_type("ipc");
  return req;
}

// The policy's defaults, without the decision log (a test writes no file of the host's).
Config Policy() {
  Config c;
  c.log.path = "";
  return c;
}

const std::string kShm = "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/pod1/shm";

FakeOs OsWithSandboxShm(int64_t bytes) {
  FakeOs os;
  FsInfo fs;
  fs.is_tmpfs = true;
  fs.is_mount_root = true;
  fs.size_bytes = bytes;
  os.fs[kShm] = fs;
  return os;
}

TEST(NriDecide, TheAnnotationSizesThePodsSandboxTmpfsAndTheNextContainerKeepsIt) {
  FakeOs os = OsWithSandboxShm(64 * kMiB);
  api::CreateContainerRequest req = Create("pod1", kShm);
  (*req.mutable_pod()->mutable_annotations())["shmkeeper.io/shm-size"] = "2Gi";
  Result<NriDecision> d = DecideCreateContainer(req.pod(), req.container(), Policy(), os);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->refusal.empty());
  EXPECT_EQ(d->plan.action, ShmAction::kResize);
  EXPECT_EQ(d->plan.source, "annotation:shmkeeper.io/shm-size");
  EXPECT_EQ(os.remounted[kShm], 2048 * kMiB);
  os.fs[kShm].size_bytes = 2048 * kMiB;  // the second container of the pod
  os.remounted.clear();
  d = DecideCreateContainer(req.pod(), req.container(), Policy(), os);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->plan.action, ShmAction::kKeep);
  EXPECT_TRUE(os.remounted.empty());
}

TEST(NriDecide, AutoTakesThePodsMemoryLimitThenTheContainers) {
  FakeOs os = OsWithSandboxShm(64 * kMiB);
  api::CreateContainerRequest req = Create("pod1", kShm);
  req.mutable_container()->mutable_linux()->mutable_resources()->mutable_memory()->mutable_limit()->set_value(300 *
                                                                                                              kMiB);
  Result<NriDecision> d = DecideCreateContainer(req.pod(), req.container(), Policy(), os);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(os.remounted[kShm], 300 * kMiB);
  EXPECT_EQ(d->plan.limit.source, "nri:container.linux.resources.memory.limit");
  req.mutable_pod()->mutable_linux()->mutable_pod_resources()->mutable_memory()->mutable_limit()->set_value(500 * kMiB);
  d = DecideCreateContainer(req.pod(), req.container(), Policy(), os);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(os.remounted[kShm], 500 * kMiB);
  EXPECT_EQ(d->plan.limit.source, "nri:pod_resources.memory.limit");
}

TEST(NriDecide, ABadSizeIsARefusalWithTheWrappersLine) {
  FakeOs os = OsWithSandboxShm(64 * kMiB);
  api::CreateContainerRequest req = Create("pod1", kShm);
  (*req.mutable_pod()->mutable_annotations())["shmkeeper.io/shm-size"] = "lots";
  Result<NriDecision> d = DecideCreateContainer(req.pod(), req.container(), Policy(), os);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->refusal.starts_with("shmkeeper: ")) << d->refusal;
  EXPECT_NE(d->refusal.find("shmkeeper.io/shm-size"), std::string::npos) << d->refusal;
  EXPECT_TRUE(os.remounted.empty());
}

TEST(NriDecide, HostIpcAnEmptyDirAndAnotherPodsTmpfsAreLeftAlone) {
  FakeOs os = OsWithSandboxShm(64 * kMiB);
  for (const api::CreateContainerRequest& req :
       {Create("pod1", "/dev/shm", /*ipc_ns=*/false),
        Create("pod1", "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/dshm"), Create("pod2", kShm)}) {
    api::CreateContainerRequest r = req;
    (*r.mutable_pod()->mutable_annotations())["shmkeeper.io/shm-size"] = "1Gi";
    Result<NriDecision> d = DecideCreateContainer(r.pod(), r.container(), Policy(), os);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->plan.action, ShmAction::kSkip) << d->plan.reason;
  }
  EXPECT_TRUE(os.remounted.empty());
}

}  // namespace
}  // namespace shmkeeper::agent
