// The agent's gRPC and HTTP layers, served for real in-process on a unix
// socket and an ephemeral port, over a watched directory of this test's own.
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <thread>

#include "base/event_send.h"
#include "node/metrics.h"
#include "server.h"
#include "shmkeeper/v1/agent.grpc.pb.h"
#include "support/served_agent.h"
#include "support/temp_dir.h"

namespace shmkeeper::agent {
namespace {

class AgentServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    shm_ = dir_ + "/shm";
    config_.agent.event_socket = dir_ + "/events.sock";
    ASSERT_TRUE(served_.Start(&config_, dir_, "127.0.0.1:0"));
  }

  void TearDown() override {
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    served_.Stop();
  }

  void Write(const std::string& name, size_t bytes) {
    std::ofstream f(shm_ + "/" + name);
    f << std::string(bytes, 'x');
  }

  // A child that holds `name` open until killed.
  pid_t Hold(const std::string& name) {
    int r[2];
    EXPECT_EQ(::pipe(r), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open((shm_ + "/" + name).c_str(), O_RDONLY);
      (void)!::write(r[1], "x", 1);
      (void)fd;
      for (;;) ::pause();
    }
    char c;
    (void)!::read(r[0], &c, 1);
    ::close(r[0]);
    ::close(r[1]);
    children_.push_back(pid);
    return pid;
  }

  // The pid of a process that has exited (reaped).
  pid_t DeadPid() {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  }

  grpc::Status ListPods(const v1::ListPodsRequest& req, v1::ListPodsResponse* resp) {
    grpc::ClientContext ctx;
    return served_.stub->ListPods(&ctx, req, resp);
  }

  test::TempDir tmp_{"/tmp/shmk-agent-"};
  std::string dir_, shm_;
  Config config_;
  test::ServedAgent served_;
  std::vector<pid_t> children_;
};

TEST_F(AgentServerTest, SocketIsOwnerAndGroupOnly) {
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/agent.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(AgentServerTest, NodeAndPods) {
  Write("a", 1 << 20);
  served_.agent->ScanNow();
  grpc::ClientContext ctx;
  v1::GetNodeResponse node;
  ASSERT_TRUE(served_.stub->GetNode(&ctx, {}, &node).ok());
  EXPECT_EQ(node.node().pod_count(), 1);
  EXPECT_GE(node.node().scans(), 2);
  v1::ListPodsResponse pods;
  ASSERT_TRUE(ListPods({}, &pods).ok());
  ASSERT_EQ(pods.pods_size(), 1);
  EXPECT_EQ(pods.pods(0).kind(), v1::POD_KIND_HOST);
  EXPECT_EQ(pods.pods(0).shm().files(), 1);
  grpc::ClientContext ctx2;
  v1::GetPodRequest req;
  req.set_name(shm_);
  v1::GetPodResponse pod;
  ASSERT_TRUE(served_.stub->GetPod(&ctx2, req, &pod).ok());
  EXPECT_EQ(pod.pod().top_segments(0).path(), shm_ + "/a");
}

TEST_F(AgentServerTest, PeakUsageOutlivesTheFiles) {
  Write("big", 3 << 20);
  served_.agent->ScanNow();
  ::unlink((shm_ + "/big").c_str());
  served_.agent->ScanNow();
  v1::ListPodsResponse pods;
  ASSERT_TRUE(ListPods({}, &pods).ok());
  ASSERT_EQ(pods.pods_size(), 1);
  EXPECT_EQ(pods.pods(0).shm().files(), 0);
  EXPECT_GE(pods.pods(0).shm().peak_used_bytes(), 3 << 20);
}

TEST_F(AgentServerTest, BadRequestsGetCodesAndMessages) {
  struct Case {
    v1::ListPodsRequest req;
    const char* expect;
  };
  std::vector<Case> cases(3);
  cases[0].req.set_selector("a b=c");
  cases[0].expect = "malformed selector";
  cases[1].req.set_page_size(100000);
  cases[1].expect = "page_size 100000";
  cases[2].req.set_page_token("zz");
  cases[2].expect = "malformed page_token";
  for (const Case& c : cases) {
    v1::ListPodsResponse resp;
    grpc::Status s = ListPods(c.req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find(c.expect), std::string::npos) << s.error_message();
  }
  v1::GetPodResponse pod;
  {
    grpc::ClientContext ctx;
    v1::GetPodRequest req;
    req.set_uid("no-such-pod");
    grpc::Status s = served_.stub->GetPod(&ctx, req, &pod);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(s.error_message().find("no-such-pod"), std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(served_.stub->GetPod(&ctx, {}, &pod).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::GetPodRequest req;
    req.set_container_id("ab");
    EXPECT_EQ(served_.stub->GetPod(&ctx, req, &pod).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::ReclaimLeaksRequest req;
    req.add_paths("relative");
    v1::ReclaimLeaksResponse resp;
    EXPECT_EQ(served_.stub->ReclaimLeaks(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Still serving.
  v1::ListPodsResponse ok;
  EXPECT_TRUE(ListPods({}, &ok).ok());
}

TEST_F(AgentServerTest, LeaksAreClassifiedAndReclaimedSafely) {
  pid_t dead = DeadPid();
  pid_t alive = ::getpid();
  Write("torch_" + std::to_string(dead) + "_0", 1 << 20);   // leaked
  Write("torch_" + std::to_string(alive) + "_1", 1 << 20);  // unheld: creator alive
  Write("plain", 1 << 20);                                  // unheld: creator unknown
  Write("torch_" + std::to_string(dead) + "_held", 1 << 20);
  Hold("torch_" + std::to_string(dead) + "_held");  // held: never a leak
  served_.agent->ScanNow();
  grpc::ClientContext ctx;
  v1::ListLeaksResponse leaks;
  ASSERT_TRUE(served_.stub->ListLeaks(&ctx, {}, &leaks).ok());
  std::map<std::string, v1::Leak> by_path;
  for (const v1::Leak& l : leaks.leaks()) by_path[l.path().substr(shm_.size() + 1)] = l;
  ASSERT_EQ(by_path.size(), 3u);
  const v1::Leak& leaked = by_path["torch_" + std::to_string(dead) + "_0"];
  EXPECT_EQ(leaked.state(), v1::LEAK_STATE_LEAKED);
  EXPECT_EQ(leaked.evidence().creator_pid(), dead);
  EXPECT_TRUE(leaked.evidence().creator_dead());
  EXPECT_TRUE(leaked.reclaimable());
  EXPECT_EQ(by_path["torch_" + std::to_string(alive) + "_1"].state(), v1::LEAK_STATE_UNHELD);
  EXPECT_EQ(by_path["plain"].state(), v1::LEAK_STATE_UNHELD);

  // Dry run by default: nothing removed.
  v1::ReclaimLeaksResponse dry;
  {
    grpc::ClientContext c;
    ASSERT_TRUE(served_.stub->ReclaimLeaks(&c, {}, &dry).ok());
  }
  EXPECT_TRUE(dry.dry_run());
  EXPECT_EQ(dry.reclaimed_size(), 1);
  EXPECT_EQ(::access((shm_ + "/torch_" + std::to_string(dead) + "_0").c_str(), F_OK), 0);
  // For real: only the leaked one goes; unheld and held ones stay.
  v1::ReclaimLeaksRequest req;
  req.set_dry_run(false);
  v1::ReclaimLeaksResponse real;
  {
    grpc::ClientContext c;
    ASSERT_TRUE(served_.stub->ReclaimLeaks(&c, req, &real).ok());
  }
  EXPECT_EQ(real.reclaimed_size(), 1) << real.DebugString();
  EXPECT_EQ(real.freed_bytes(), 1 << 20);
  // The two unheld ones are kept for their verdict: the reason as an enum, its
  // message, and the old "<word>: <message>" text still filled.
  ASSERT_EQ(real.skipped_size(), 2);
  for (const v1::SkippedLeak& k : real.skipped()) {
    EXPECT_EQ(k.kind(), v1::SKIP_REASON_VERDICT) << k.leak().path();
    EXPECT_EQ(k.message(), "unheld, but nothing shows it was leaked");
    EXPECT_EQ(k.reason(), "verdict: " + k.message());
  }
  EXPECT_NE(::access((shm_ + "/torch_" + std::to_string(dead) + "_0").c_str(), F_OK), 0);
  for (const char* stays : {"plain", "_held"}) {
    std::string name = std::string(stays) == "plain" ? "plain" : "torch_" + std::to_string(dead) + "_held";
    EXPECT_EQ(::access((shm_ + "/" + name).c_str(), F_OK), 0) << name;
  }
}

// A Watch stream's initial metadata says "subscribed" (service.cc): every
// event after it arrives. The deadline turns a missed event into a failure
// in seconds, not a hang until ctest's timeout.
TEST_F(AgentServerTest, WatchStreamsEvents) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = served_.stub->Watch(&ctx, {});
  reader->WaitForInitialMetadata();  // subscribed
  Write("torch_" + std::to_string(DeadPid()) + "_0", 4096);
  served_.agent->ScanNow();
  v1::Event e;
  ASSERT_TRUE(reader->Read(&e));
  EXPECT_EQ(e.type(), v1::EVENT_TYPE_LEAK_FOUND);
  EXPECT_NE(e.message().find("leaked segment"), std::string::npos);
  ctx.TryCancel();
}

// agent.maxWatchStreams N: stream N+1 ends at once with RESOURCE_EXHAUSTED,
// the N others keep streaming, and a slot freed by a cancelled stream is
// taken by the next.
TEST_F(AgentServerTest, WatchStreamsOverTheCapGetResourceExhausted) {
  constexpr int kCap = 3;
  Config capped = config_;
  capped.agent.max_watch_streams = kCap;
  capped.agent.event_socket = "";
  ScanOptions scan;
  scan.runtime_roots = {dir_ + "/no-runtime"};
  scan.docker_socket = "";
  scan.host_shm_dirs = {shm_};
  scan.grace = capped.leaks.grace;
  Agent agent(capped, scan);
  ASSERT_TRUE(agent.Start().ok());
  ServerOptions opts;
  opts.unix_socket = dir_ + "/capped.sock";
  opts.metrics_address = "";
  AgentServer server(&agent, opts);
  ASSERT_TRUE(server.Start().ok());
  auto stub =
      v1::ShmKeeper::NewStub(grpc::CreateChannel("unix://" + opts.unix_socket, grpc::InsecureChannelCredentials()));

  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Event>>> readers;
  for (int i = 0; i < kCap; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));  // never hang
    readers.push_back(stub->Watch(ctxs.back().get(), {}));
    readers.back()->WaitForInitialMetadata();  // admitted and subscribed
  }
  grpc::ClientContext over_ctx;
  over_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto over = stub->Watch(&over_ctx, {});
  v1::Event e;
  EXPECT_FALSE(over->Read(&e));
  grpc::Status st = over->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("agent.maxWatchStreams"), std::string::npos) << st.error_message();

  // Positive control: the N admitted streams still get the next event.
  Write("torch_" + std::to_string(DeadPid()) + "_0", 4096);
  agent.ScanNow();
  for (auto& r : readers) {
    ASSERT_TRUE(r->Read(&e));
    EXPECT_EQ(e.type(), v1::EVENT_TYPE_LEAK_FOUND);
  }
  // A cancelled stream frees its slot.
  ctxs[0]->TryCancel();
  (void)readers[0]->Finish();
  // The server notices the cancel within one EventHub wait (500 ms): ask
  // again until a stream is admitted (its headers come) or 10 s passed.
  bool admitted = false;
  auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
  while (!admitted && std::chrono::system_clock::now() < deadline) {
    grpc::ClientContext again_ctx;
    again_ctx.set_deadline(deadline);
    auto again = stub->Watch(&again_ctx, {});
    again->WaitForInitialMetadata();  // admitted: headers; refused: the status ends the call
    again_ctx.TryCancel();
    grpc::Status st = again->Finish();
    ASSERT_NE(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    admitted = st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  EXPECT_TRUE(admitted);
  for (size_t i = 1; i < ctxs.size(); ++i) ctxs[i]->TryCancel();
  for (size_t i = 1; i < readers.size(); ++i) (void)readers[i]->Finish();
  server.Shutdown();
  agent.Stop();
}

TEST_F(AgentServerTest, HealthAndMetrics) {
  // grpc.health.v1.Health/Check with an empty request: SERVING is field 1 = 1.
  grpc::GenericStub generic(served_.channel);
  grpc::ClientContext ctx;
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) { done.set_value(s); });
  ASSERT_TRUE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));

  httplib::Client http("127.0.0.1", served_.server->metrics_port());
  Write("x", 8192);
  served_.agent->ScanNow();
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("shmkeeper_pod_shm_files{namespace=\"\",pod=\"" + shm_), std::string::npos);
  EXPECT_NE(metrics->body.find("shmkeeper_scan_duration_seconds "), std::string::npos);
  EXPECT_NE(metrics->body.find("# TYPE shmkeeper_pod_shm_used_bytes gauge"), std::string::npos);
}

// Liveness is real: a stalled scan loop or a lost socket answers 503 with the
// reason, and `shmkeeperd --probe` (ProbeHealth) follows the configured address.
TEST_F(AgentServerTest, LivenessReportsAStalledScanLoopAndLostSockets) {
  const std::string sock = dir_ + "/agent.sock";
  httplib::Client http("127.0.0.1", served_.server->metrics_port());
  auto live = http.Get("/healthz");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  EXPECT_EQ(live->body, "ok\n");
  Config probe_config = config_;
  probe_config.agent.socket = sock;
  probe_config.agent.metrics_address = "0.0.0.0:" + std::to_string(served_.server->metrics_port());
  Result<std::string> probe = ProbeHealth(probe_config);
  ASSERT_TRUE(probe.ok()) << probe.status().message();

  // Four hours on, the hourly scan loop has missed three scans.
  HealthReport later = CheckHealth(*served_.agent, sock, std::chrono::system_clock::now() + std::chrono::hours(4));
  ASSERT_EQ(later.problems.size(), 1u);
  EXPECT_NE(later.problems[0].find("scan loop stalled"), std::string::npos) << later.problems[0];

  ASSERT_EQ(::unlink(sock.c_str()), 0);  // e.g. the node's /run/shmkeeper was wiped
  live = http.Get("/healthz");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 503);
  EXPECT_EQ(live->body, "agent socket " + sock + " accepts no connection\n");
  probe = ProbeHealth(probe_config);
  ASSERT_FALSE(probe.ok());
  EXPECT_NE(probe.status().message().find("accepts no connection"), std::string::npos);
  probe_config.agent.metrics_address = "";
  EXPECT_FALSE(ProbeHealth(probe_config).ok());  // without metrics: the socket itself
}

}  // namespace
}  // namespace shmkeeper::agent

namespace shmkeeper::agent {
namespace {

// Waits up to `seconds` for the agent's snapshot to satisfy `done`: checks
// each snapshot as its scan completes (Agent::WaitForScan), never on a timer.
template <typename F>
bool Eventually(const Agent& a, double seconds, F done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    uint64_t scans = a.scans_completed();  // before the snapshot: a scan published after it wakes the wait
    if (auto s = a.Snapshot(); s && done(*s)) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    a.WaitForScan(scans, left);
  }
}

// The periodic scan is an hour away: only inotify can make the agent see a
// new file in a watched shm directory.
TEST_F(AgentServerTest, AFileInAWatchedDirectoryTriggersAScan) {
  int64_t before = served_.agent->Snapshot()->scans;
  Write("fresh", 4096);
  EXPECT_TRUE(Eventually(*served_.agent, 5, [&](const NodeSnapshot& s) {
    return s.scans > before && !s.pods.empty() && s.pods[0].files == 1;
  }));
}

// A datagram on the event socket (the hook's poststop) wakes the agent too.
TEST_F(AgentServerTest, AStoppedEventTriggersAScan) {
  int64_t before = served_.agent->Snapshot()->scans;
  ASSERT_TRUE(SendEvent(dir_ + "/events.sock", R"({"type":"stopped","id":"x"})").ok());
  EXPECT_TRUE(Eventually(*served_.agent, 5, [&](const NodeSnapshot& s) { return s.scans > before; }));
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/events.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);  // any container user may send; nothing in a payload is trusted
}

// Tests wait for "scan N completed", not for wall time: the count moves with
// each published scan and WaitForScan wakes on it (and times out without one).
TEST_F(AgentServerTest, ScanCompletionCanBeAwaited) {
  uint64_t before = served_.agent->scans_completed();
  EXPECT_GE(before, 1u);  // the startup scan ran before Start returned
  EXPECT_FALSE(
      served_.agent->WaitForScan(before, std::chrono::milliseconds(50)));  // the next periodic scan is an hour away
  std::thread scanner([&] { served_.agent->ScanNow(); });
  EXPECT_TRUE(served_.agent->WaitForScan(before, std::chrono::seconds(10)));
  scanner.join();
  EXPECT_EQ(served_.agent->scans_completed(), before + 1);
  ASSERT_TRUE(SendEvent(dir_ + "/events.sock", R"({"type":"stopped","id":"x"})").ok());
  EXPECT_TRUE(served_.agent->WaitForScan(before + 1, std::chrono::seconds(10)));  // a poke's scan counts too
}

// ---- errors survived: counted, logged, on /metrics --------------------------

// Log lines an agent wrote, safe to read while its threads write.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  AgentLog Sink() {
    return [this](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> l(mu);
      lines.push_back(line);
    };
  }
  bool Has(const std::string& part) {
    std::lock_guard<std::mutex> l(mu);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& s) { return s.find(part) != std::string::npos; });
  }
};

// Every report is counted; at most kLinesPerWindow a minute are logged per
// counter, each counter on its own.
TEST(ReporterTest, CountsAllAndLogsAtMostTenLinesAMinutePerCounter) {
  Reporter reporter;
  Lines log;
  reporter.SetLog(log.Sink());
  for (int i = 0; i < 25; ++i) reporter.Report(kWatcherErrors, "w" + std::to_string(i));
  reporter.Report(kDockerEnrichmentErrors, "d");
  EXPECT_EQ(reporter.Count(kWatcherErrors), 25);
  EXPECT_EQ(reporter.Count(kDockerEnrichmentErrors), 1);
  EXPECT_EQ(reporter.Count(kDatagramsNoCredentials), 0);
  EXPECT_EQ(log.lines.size(), static_cast<size_t>(Reporter::kLinesPerWindow + 1));
  EXPECT_TRUE(log.Has("w9"));
  EXPECT_FALSE(log.Has("w10"));
  EXPECT_TRUE(log.Has("d"));
}

// A unix socket file bound but not listening: connect(2) is refused.
UniqueFd RefusingSocket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

ScanOptions QuietScan(const std::string& dir) {
  ScanOptions scan;
  scan.runtime_roots = {dir + "/no-runtime"};
  scan.docker_socket = "";
  scan.host_shm_dirs = {dir + "/shm"};
  return scan;
}

TEST_F(AgentServerTest, ADockerSocketThatRefusesIsAnEnrichmentError) {
  UniqueFd refusing = RefusingSocket(dir_ + "/docker.sock");
  ScanOptions scan = QuietScan(dir_);
  scan.docker_socket = dir_ + "/docker.sock";
  Config config = config_;
  config.agent.event_socket = "";
  Agent agent(config, scan);
  Lines log;
  agent.SetLog(log.Sink());
  ASSERT_TRUE(agent.Start().ok());  // its first scan
  agent.ScanNow();
  EXPECT_EQ(agent.reporter().Count(kDockerEnrichmentErrors), 2);
  EXPECT_TRUE(log.Has("container names and labels from Docker unavailable"));
  EXPECT_NE(
      RenderMetrics(agent.Snapshot().get(), agent).find("shmkeeper_enrichment_errors_total{source=\"docker\"} 2\n"),
      std::string::npos);
}

TEST_F(AgentServerTest, NoDockerSocketIsNoEnrichmentError) {
  ScanOptions scan = QuietScan(dir_);
  scan.docker_socket = dir_ + "/no-docker.sock";
  Config config = config_;
  config.agent.event_socket = "";
  Agent agent(config, scan);
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_EQ(agent.reporter().Count(kDockerEnrichmentErrors), 0);
}

// With no file descriptor left, inotify_init1 fails: the agent runs on its
// periodic scans, and says so.
TEST_F(AgentServerTest, AWatcherThatCannotStartIsCountedAndLogged) {
  Config config = config_;
  config.agent.event_socket = "";
  Agent agent(config, QuietScan(dir_));
  Lines log;
  agent.SetLog(log.Sink());
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(lowest_free);  // the next descriptor is over the limit
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
  Status started = agent.Start();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(agent.reporter().Count(kWatcherErrors), 1);
  EXPECT_TRUE(log.Has("inotify watcher not started, event-driven scans are off"));
  EXPECT_NE(RenderMetrics(agent.Snapshot().get(), agent).find("shmkeeper_watcher_errors_total 1\n"), std::string::npos);
}

// A datagram over the receive buffer arrives truncated and is refused as
// malformed, counted like any other.
TEST_F(AgentServerTest, AnOversizedDatagramIsCountedAsMalformed) {
  int64_t before = served_.agent->counters().datagrams_rejected["malformed"];
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, (dir_ + "/events.sock").c_str(), sizeof addr.sun_path - 1);
  std::string big = R"({"type":"stopped","id":")" + std::string(8192, 'x') + R"("})";
  ASSERT_EQ(::sendto(fd.get(), big.data(), big.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr),
            static_cast<ssize_t>(big.size()));
  // One thread takes the datagrams in order: once the "stopped" sent after
  // it has made its scan, the oversized one has been judged.
  uint64_t scans = served_.agent->scans_completed();
  ASSERT_TRUE(SendEvent(dir_ + "/events.sock", R"({"type":"stopped","id":"x"})").ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (served_.agent->counters().datagrams_rejected["malformed"] == before) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !served_.agent->WaitForScan(scans, left)) break;
    scans = served_.agent->scans_completed();
  }
  EXPECT_EQ(served_.agent->counters().datagrams_rejected["malformed"], before + 1);
}

// A sender the agent cannot see (outside its pid namespace) arrives without a
// pid: dropped, but counted. The agent runs as pid 1 of a new pid namespace
// in a child; this test process sends. Needs CAP_SYS_ADMIN. Nothing waits
// on time: the agent says when its socket is up (a pipe), this process says
// when it has sent (a pipe), and the agent's own "stopped" sent after that
// datagram is judged, by the one datagram thread, after it (a scan).
TEST_F(AgentServerTest, ADatagramWithoutSenderCredentialsIsCounted) {
  const std::string sock = dir_ + "/ns-events.sock";
  int up[2], sent[2];
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(sent), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(up[0]);
    ::close(sent[1]);
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(77);
    pid_t agent_pid = ::fork();
    if (agent_pid == 0) {
      Config config = config_;
      config.agent.event_socket = sock;
      Agent agent(config, QuietScan(dir_));
      if (!agent.Start().ok()) ::_exit(2);
      (void)!::write(up[1], "x", 1);
      char c;
      if (::read(sent[0], &c, 1) != 1) ::_exit(4);
      uint64_t scans = agent.scans_completed();
      if (!SendEvent(sock, R"({"type":"stopped","id":"y"})").ok()) ::_exit(5);  // with credentials: a scan
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (agent.reporter().Count(kDatagramsNoCredentials) == 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || !agent.WaitForScan(scans, left)) break;
        scans = agent.scans_completed();
      }
      int64_t n = agent.reporter().Count(kDatagramsNoCredentials);
      ::_exit(n == 1 ? 0 : 1);
    }
    ::close(up[1]);  // the agent's copy alone: its exit ends the parent's read
    int status = 0;
    ::waitpid(agent_pid, &status, 0);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 3);
  }
  ::close(up[1]);
  ::close(sent[0]);
  char c;
  if (::read(up[0], &c, 1) == 1) {  // the agent is up (EOF: it never came up, or no pid namespace)
    EXPECT_TRUE(SendEvent(sock, R"({"type":"stopped","id":"x"})").ok());
    (void)!::write(sent[1], "x", 1);  // only now: with nobody left to read it a write would raise SIGPIPE
  }
  ::close(up[0]);
  ::close(sent[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no CAP_SYS_ADMIN for a pid namespace";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace shmkeeper::agent
