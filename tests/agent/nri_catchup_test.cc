// The NRI plugin's catch-up at (re)connection (nri_catchup.h), and the
// session's side of it (nri_session.h): Synchronize handed over whole after
// its answer; a CreateContainer read after the runtime closed its end (it gave
// up waiting) is abandoned, not decided. Scripted runtime over a socketpair,
// scripted facts (unit/fake_os.h), a sandbox layout in a temporary directory.
#include "nri_catchup.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "base/json.h"
#include "decide/decision_log.h"
#include "nri/ttrpc.pb.h"
#include "nri/wire.h"
#include "nri_session.h"
#include "unit/fake_os.h"

namespace shmkeeper::agent {
namespace {
namespace api = ::nri::pkg::api::v1alpha1;
namespace fs = std::filesystem;
using shmkeeper::nri::EncodeMessage;
using shmkeeper::nri::MessageType;
using shmkeeper::nri::TtrpcMessage;

constexpr int64_t kMiB = 1 << 20;

class Recorder : public NriHandler {
 public:
  int creates = 0, abandoned = 0;
  std::vector<api::SynchronizeRequest> synced;
  void Configured(const api::ConfigureRequest&) override {}
  Result<api::CreateContainerResponse> CreateContainer(const api::CreateContainerRequest&) override {
    ++creates;
    return api::CreateContainerResponse();
  }
  void Synchronized(const api::SynchronizeRequest& all) override { synced.push_back(all); }
  void Abandoned(const api::CreateContainerRequest&) override { ++abandoned; }
};

std::string Frame(uint32_t conn, uint32_t stream, MessageType type, const std::string& payload) {
  TtrpcMessage m;
  m.conn = conn;
  m.stream_id = stream;
  m.type = static_cast<uint8_t>(type);
  m.payload = payload;
  return *EncodeMessage(m);
}

std::string Call(uint32_t stream, const std::string& method, const std::string& payload) {
  ttrpc::Request req;
  req.set_service(kNriPluginService);
  req.set_method(method);
  req.set_payload(payload);
  return Frame(shmkeeper::nri::kPluginServiceConn, stream, MessageType::kRequest, req.SerializeAsString());
}

// Runs a session whose runtime wrote `script` (after the registration's
// answer). With `answers` < 0 the runtime then shuts its end at once: all is in
// the socket before the plugin reads a byte. Otherwise it reads the
// registration and `answers` answers first (the runtime waiting), then shuts.
Status RunScripted(Recorder& handler, const std::string& script, int answers) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::string bytes =
      Frame(shmkeeper::nri::kRuntimeServiceConn, 1, MessageType::kResponse, ttrpc::Response().SerializeAsString()) +
      script;
  EXPECT_EQ(::write(sv[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  if (answers < 0) ::shutdown(sv[1], SHUT_WR);
  Status ended;
  std::thread plugin([&] { ended = RunNriSession(sv[0], NriSessionOptions{}, handler, nullptr); });
  shmkeeper::nri::WireReader reader;
  for (int seen = 0; answers >= 0 && seen < answers + 1;) {
    if (reader.Next()) {
      ++seen;
      continue;
    }
    char buf[4096];
    ssize_t n = ::read(sv[1], buf, sizeof(buf));
    if (n <= 0) break;
    EXPECT_TRUE(reader.Feed(std::string_view(buf, static_cast<size_t>(n))).ok());
  }
  if (answers >= 0) ::shutdown(sv[1], SHUT_WR);
  plugin.join();
  ::close(sv[0]);
  ::close(sv[1]);
  return ended;
}

TEST(NriSession, ACreateContainerTheRuntimeStoppedWaitingForIsAbandonedNotDecided) {
  std::string create = Call(3, "CreateContainer", api::CreateContainerRequest().SerializeAsString());
  Recorder late;
  Status ended = RunScripted(late, create, /*answers=*/-1);
  EXPECT_NE(ended.message().find("closed"), std::string::npos) << ended.message();
  EXPECT_EQ(late.creates, 0);
  EXPECT_EQ(late.abandoned, 1);
  Recorder timely;  // control: the same call, the runtime still there
  EXPECT_NE(RunScripted(timely, create, /*answers=*/1).message().find("closed"), std::string::npos);
  EXPECT_EQ(timely.creates, 1);
  EXPECT_EQ(timely.abandoned, 0);
}

TEST(NriSession, SynchronizeChunksAreHandedOverWholeAfterTheLastAnswer) {
  api::SynchronizeRequest a, b;
  a.add_pods()->set_id("p1");
  a.set_more(true);
  b.add_pods()->set_id("p2");
  b.add_containers()->set_id("c2");
  Recorder r;
  (void)RunScripted(r, Call(3, "Synchronize", a.SerializeAsString()) + Call(5, "Synchronize", b.SerializeAsString()),
                    /*answers=*/2);
  ASSERT_EQ(r.synced.size(), 1u);
  EXPECT_EQ(r.synced[0].pods_size(), 2);
  EXPECT_EQ(r.synced[0].containers_size(), 1);
}

// A containerd-like layout in a temporary directory: the sandbox's shm
// source and its task bundle.
class CatchUp : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shmk-nri-catchup-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    state_ = tmpl;
  }
  void TearDown() override { fs::remove_all(state_); }

  std::string Shm(const std::string& pod) { return state_ + "/io.containerd.grpc.v1.cri/sandboxes/" + pod + "/shm"; }
  std::string Bundle(const std::string& pod) { return state_ + "/io.containerd.runtime.v2.task/k8s.io/" + pod; }

  // Pod `id` with a 64 MiB sandbox tmpfs (size `bytes`) and one container in `state`.
  void AddPod(api::SynchronizeRequest* sync, const std::string& id, const std::string& size, int64_t bytes,
              api::ContainerState state = api::CONTAINER_RUNNING) {
    api::PodSandbox* pod = sync->add_pods();
    pod->set_id(id);
    pod->set_name(id);
    pod->set_namespace_("ns");
    if (!size.empty()) (*pod->mutable_annotations())["shmkeeper.io/shm-size"] = size;
    api::Container* c = sync->add_containers();
    c->set_id(id + "-c");
    c->set_pod_sandbox_id(id);
    c->set_state(state);
    api::Mount* m = c->add_mounts();
    m->set_destination("/dev/shm");
    m->set_type("bind");
    m->set_source(Shm(id));
    c->mutable_linux()->add_namespaces()->set_type("ipc");
    fs::create_directories(Bundle(id));
    FsInfo info;
    info.is_tmpfs = true;
    info.is_mount_root = true;
    info.size_bytes = bytes;
    os_.fs[Shm(id)] = info;
  }

  Config Policy() {
    Config c;
    c.log.path = "";
    return c;
  }

  std::string state_;
  FakeOs os_;
};

TEST_F(CatchUp, APodCreatedWhileTheAgentWasAwayIsResizedAndRecordedLate) {
  api::SynchronizeRequest sync;
  AddPod(&sync, "away", "2Gi", 64 * kMiB);
  std::vector<NriCatchUp> late = CatchUpPods(sync, Policy(), os_);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].outcome, "resized") << late[0].message;
  EXPECT_EQ(late[0].who, "ns/away");
  EXPECT_EQ(os_.remounted[Shm("away")], 2048 * kMiB);
  std::optional<SizingRecord> rec = ReadSizingRecord(Bundle("away"));
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->by, kNriLate);
  EXPECT_EQ(rec->bytes, 2048 * kMiB);
  // Caught up: the next connection finds it sized (its record says so) and leaves it.
  os_.remounted.clear();
  EXPECT_TRUE(CatchUpPods(sync, Policy(), os_).empty());
  EXPECT_TRUE(os_.remounted.empty());
}

TEST_F(CatchUp, ABadSizeIsReportedAndNotApplied) {
  api::SynchronizeRequest sync;
  AddPod(&sync, "bad", "lots", 64 * kMiB);
  std::vector<NriCatchUp> late = CatchUpPods(sync, Policy(), os_);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].outcome, "refused");
  EXPECT_NE(late[0].message.find("shmkeeper.io/shm-size"), std::string::npos) << late[0].message;
  EXPECT_TRUE(os_.remounted.empty());
  EXPECT_FALSE(ReadSizingRecord(Bundle("bad")));
}

// The decision log says what happened to a running pod, once: sized late
// ("nri-late", never first "nri" and then rewritten), and a bad size left as
// it is ("keep": a running pod is not refused). Control: a CreateContainer
// decision of the same kind says "nri" and "refuse".
TEST_F(CatchUp, TheDecisionLogNamesTheCatchUpAndNeverRefusesARunningPod) {
  Config config = Policy();
  config.log.path = state_ + "/runtime.log";
  api::SynchronizeRequest sync;
  AddPod(&sync, "away", "2Gi", 64 * kMiB);
  AddPod(&sync, "bad", "lots", 64 * kMiB);
  ASSERT_EQ(CatchUpPods(sync, config, os_).size(), 2u);
  api::SynchronizeRequest create;
  AddPod(&create, "new", "lots", 64 * kMiB);
  Result<NriDecision> d = DecideCreateContainer(create.pods(0), create.containers(0), config, os_);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_FALSE(d->refusal.empty());
  std::ifstream in(config.log.path);
  std::vector<std::pair<std::string, std::string>> seen;  // (by, action)
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    seen.emplace_back(j.value("by", ""), j.value("action", ""));
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::string>>{
                      {"nri-late", "resize"}, {"nri-late", "keep"}, {"nri", "refuse"}}));
}

TEST_F(CatchUp, SizedStoppedAndContainerlessPodsAndNriRecordsAreLeftAlone) {
  api::SynchronizeRequest sync;
  AddPod(&sync, "sized", "2Gi", 2048 * kMiB);                          // NRI sized it at CreateContainer
  AddPod(&sync, "stopped", "2Gi", 64 * kMiB, api::CONTAINER_STOPPED);  // nothing runs in it
  sync.add_pods()->set_id("empty");                                    // its CreateContainer will come
  AddPod(&sync, "recorded", "2Gi", 64 * kMiB);                         // sized by nri: a policy change is no catch-up
  SizingRecord rec;
  rec.by = "nri";
  rec.bytes = 64 * kMiB;
  ASSERT_TRUE(WriteSizingRecord(Bundle("recorded"), rec).ok());
  EXPECT_TRUE(CatchUpPods(sync, Policy(), os_).empty());
  EXPECT_TRUE(os_.remounted.empty());
  AddPod(&sync, "away", "1Gi", 64 * kMiB);  // control: the one pod behind is caught up
  std::vector<NriCatchUp> late = CatchUpPods(sync, Policy(), os_);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].pod_id, "away");
  EXPECT_EQ(os_.remounted.size(), 1u);
}

}  // namespace
}  // namespace shmkeeper::agent
