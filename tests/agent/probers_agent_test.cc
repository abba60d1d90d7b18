// Several agents on one node (node/probers.h, observer.h): an in-process
// agent with its observer, registered in a private state directory, beside
// real processes. A process registered in the same directory (another agent,
// played by a forked child that joins) opens and closes files as lease probes
// do: those opens are not use, so a leak still becomes leaked. A fork of the
// agent's own process that does not join (the b25392c failure: forks of a
// test binary hosting an agent) is an ordinary process: its opens are use.
// And a registered process's open that overlapped the agent's probe (the
// probe said "held") is probed again when it closes, once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "node/engine.h"
#include "node/probers.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

pid_t DeadPid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// Opens and closes `path` every 100 ms, holding it 50 us (a probe's rhythm),
// until killed.
[[noreturn]] void OpenCloseLoop(const std::string& path) {
  for (;;) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      timespec hold{0, 50'000};
      ::nanosleep(&hold, nullptr);
      ::close(fd);
    }
    timespec gap{0, 100'000'000};
    ::nanosleep(&gap, nullptr);
  }
}

class ProbersAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(shm_.ok() && state_.ok());
    dead_ = DeadPid();
  }
  void TearDown() override {
    for (pid_t p : children_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    agent_.reset();
  }

  void StartAgent() {
    Config config;
    config.leaks.grace = seconds(1);
    config.agent.scan_interval = milliseconds(200);  // observed scans (Check): the cached verdicts are what is tested
    config.agent.event_socket = "";
    config.agent.observe = true;
    ScanOptions scan;
    scan.runtime_roots = {};
    scan.docker_socket = "";
    scan.host_shm_dirs = {shm_.path()};
    scan.grace = config.leaks.grace;
    agent_ = std::make_unique<Agent>(config, scan);
    Result<std::unique_ptr<ProberRegistry>> reg = ProberRegistry::Join(state_.path());
    ASSERT_TRUE(reg.ok()) << reg.status().message();
    agent_->SetProbers(std::move(*reg));
    ASSERT_TRUE(agent_->Start().ok());
    ASSERT_STREQ(agent_->observer_mode(), "fanotify");
  }

  std::string Make(const std::string& suffix) {
    std::string path = shm_ / ("torch_" + std::to_string(dead_) + "_" + suffix);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::write(fd, "data", 4), 4);
    ::close(fd);
    return path;
  }

  // Forks a child that runs `body` (which never returns); `join` registers it
  // first in the agent's state directory. Returns once `body` has begun
  // (body's first argument: a fd to write one byte to; the second: a fd to
  // read commands from).
  pid_t Spawn(bool join, const std::function<void(int ready, int cmd)>& body) {
    int ready[2], cmd[2];
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(cmd, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(ready[0]);
      ::close(cmd[1]);
      static std::unique_ptr<ProberRegistry> kept;  // the child's own registration
      if (join) {
        Result<std::unique_ptr<ProberRegistry>> r = ProberRegistry::Join(state_.path());
        if (!r.ok()) ::_exit(3);
        kept = std::move(*r);
      }
      body(ready[1], cmd[0]);
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(cmd[0]);
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    children_.push_back(pid);
    cmds_[pid] = cmd[1];
    return pid;
  }
  void Tell(pid_t child) { EXPECT_EQ(::write(cmds_[child], "c", 1), 1); }
  void Kill(pid_t child) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    std::erase(children_, child);
  }

  std::optional<LeakState> StateOf(const std::string& path) const {
    for (const LeakRecord& l : agent_->ListLeaks("", "")) {
      if (l.path == path) return l.state;
    }
    return std::nullopt;
  }
  // Waits for the scans of `how_long` (by the agent's scans, at most that
  // long plus a second), calling `each` after every scan; stops early when it
  // returns true. Returns whether it did.
  bool EachScan(steady_clock::duration how_long, const std::function<bool()>& each) {
    auto until = steady_clock::now() + how_long;
    while (steady_clock::now() < until) {
      uint64_t n = agent_->scans_completed();
      agent_->WaitForScan(n, seconds(1));
      if (each()) return true;
    }
    return false;
  }

  test::TempDir shm_{"/dev/shm/shmk-probers-"};
  test::TempDir state_{"/tmp/shmk-probers-state-"};
  pid_t dead_ = 0;
  std::unique_ptr<Agent> agent_;
  std::vector<pid_t> children_;
  std::map<pid_t, int> cmds_;
};

void Ready(int fd) { (void)!::write(fd, "r", 1); }

TEST_F(ProbersAgentTest, ARegisteredProcessOpensAreNotUseAForkOfTheAgentsAre) {
  StartAgent();
  std::string probed = Make("probed"), used = Make("used");
  Spawn(/*join=*/true, [&](int ready, int) {
    Ready(ready);
    OpenCloseLoop(probed);
  });
  pid_t fork_of_agent = Spawn(/*join=*/false, [&](int ready, int) {
    Ready(ready);
    OpenCloseLoop(used);
  });
  std::set<LeakState> used_states;
  auto t0 = steady_clock::now();
  bool leaked = EachScan(seconds(6), [&] {
    if (std::optional<LeakState> s = StateOf(used)) used_states.insert(*s);
    return StateOf(probed) == LeakState::kLeaked && steady_clock::now() - t0 > seconds(3);
  });
  EXPECT_TRUE(leaked) << "a registered process's opens kept the file in use";
  EXPECT_FALSE(used_states.count(LeakState::kLeaked)) << "a fork of the agent's process was not taken for use";
  ObserverCounters oc = agent_->observer_counters();
  EXPECT_EQ(oc.other_agents, 1);
  EXPECT_GT(oc.prober_events, 10);
  // Control: the fork's file was a leak all along but for its use.
  Kill(fork_of_agent);
  EXPECT_TRUE(EachScan(seconds(5), [&] { return StateOf(used) == LeakState::kLeaked; }));
}

TEST_F(ProbersAgentTest, AnOverlappingProbeIsProbedAgainOnceItCloses) {
  std::string f = Make("overlap");
  // A registered process (another agent) has the file open — a probe in
  // flight — while this agent probes it: the kernel says held.
  pid_t other = Spawn(/*join=*/true, [&](int ready, int cmd) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) ::_exit(4);
    Ready(ready);
    char c;
    (void)!::read(cmd, &c, 1);
    ::close(fd);
    for (;;) ::pause();
  });
  StartAgent();
  // Held while it is open (the control: the cached verdict is "held").
  EXPECT_FALSE(EachScan(seconds(2), [&] { return StateOf(f) == LeakState::kLeaked; }));
  int64_t probes = agent_->observer_counters().probes;
  Tell(other);  // its close is not use, but ends what made our probe say "held"
  EXPECT_TRUE(EachScan(seconds(5), [&] { return StateOf(f) == LeakState::kLeaked; }))
      << "the verdict of a probe that overlapped another agent's stayed cached";
  int64_t after = agent_->observer_counters().probes;
  EXPECT_GE(after, probes + 1);
  // Once: nothing probes it again while nothing happens.
  EachScan(seconds(1), [] { return false; });
  EXPECT_EQ(agent_->observer_counters().probes, after);
  EXPECT_EQ(agent_->reporter().Count(kAuditMissedEvent), 0);
}

}  // namespace
}  // namespace shmkeeper
