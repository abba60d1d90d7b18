// Property: with hundreds of random segments, random holders (open fds and
// mappings) and random kill -9s, the agent lists every truly leaked segment
// (no holder, creator dead), never lists a held one, and reclaim removes
// exactly the leaked ones: zero removals of held segments.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <set>

#include "node/engine.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

constexpr int kFiles = 300;
constexpr int kCreators = 16;
constexpr int kHolders = 24;

struct Child {
  pid_t pid = 0;
  bool alive = true;
};

// Forks a process that opens (or maps) `files` and then waits to be killed.
Child SpawnHolder(const std::vector<std::string>& files, bool map) {
  int p[2];
  if (::pipe(p) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const std::string& f : files) {
      int fd = ::open(f.c_str(), O_RDWR);
      if (fd < 0) continue;
      if (map) {
        void* m = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
        (void)m;
        ::close(fd);
      }
    }
    (void)!::write(p[1], "x", 1);
    for (;;) ::pause();
  }
  char c;
  (void)!::read(p[0], &c, 1);
  ::close(p[0]);
  ::close(p[1]);
  return {pid, true};
}

Child SpawnSleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) ::pause();
  }
  return {pid, true};
}

void Kill(Child* c) {
  ::kill(c->pid, SIGKILL);
  ::waitpid(c->pid, nullptr, 0);
  c->alive = false;
}

class AgentProperty : public ::testing::TestWithParam<unsigned> {};

TEST_P(AgentProperty, NeverRemovesHeldAndFindsEveryLeak) {
  std::mt19937 rng(GetParam());
  test::TempDir tmp("/tmp/shmk-prop-");
  ASSERT_TRUE(tmp.ok());
  const std::string& dir = tmp.path();

  std::vector<Child> creators;
  for (int i = 0; i < kCreators; ++i) creators.push_back(SpawnSleeper());
  struct FileInfo {
    std::string path;
    size_t creator;  // index into creators
  };
  std::vector<FileInfo> files;
  for (int i = 0; i < kFiles; ++i) {
    size_t c = rng() % creators.size();
    std::string path = dir + "/torch_" + std::to_string(creators[c].pid) + "_" + std::to_string(i);
    std::ofstream(path) << std::string(4096 + rng() % 8192, 'x');
    files.push_back({path, c});
  }
  std::vector<Child> holders;
  std::vector<std::set<size_t>> holds;
  for (int h = 0; h < kHolders; ++h) {
    std::set<size_t> mine;
    for (size_t f = 0; f < files.size(); ++f) {
      if (rng() % 100 < 3) mine.insert(f);
    }
    std::vector<std::string> paths;
    for (size_t f : mine) paths.push_back(files[f].path);
    holders.push_back(SpawnHolder(paths, rng() % 2));
    holds.push_back(mine);
  }
  for (Child& c : creators) {
    if (rng() % 2) Kill(&c);
  }
  for (Child& h : holders) {
    if (rng() % 2) Kill(&h);
  }

  std::set<std::string> held, leaked;
  for (size_t f = 0; f < files.size(); ++f) {
    bool is_held = false;
    for (size_t h = 0; h < holders.size(); ++h) is_held |= holders[h].alive && holds[h].count(f);
    if (is_held) held.insert(files[f].path);
    if (!is_held && !creators[files[f].creator].alive) leaked.insert(files[f].path);
  }

  ASSERT_GT(leaked.size(), 20u) << "the random draw must produce leaks to test";
  ASSERT_GT(held.size(), 20u) << "the random draw must produce held segments to test";

  Config config;
  config.leaks.grace = std::chrono::seconds(0);
  ScanOptions scan;
  scan.runtime_roots = {};
  scan.docker_socket = "";
  scan.host_shm_dirs = {dir};
  scan.grace = config.leaks.grace;
  Agent agent(config, scan);
  agent.ScanNow();
  std::set<std::string> listed_leaked;
  for (const LeakRecord& l : agent.ListLeaks("", "")) {
    EXPECT_FALSE(held.count(l.path)) << "held segment listed: " << l.path;
    if (l.state == LeakState::kLeaked) listed_leaked.insert(l.path);
  }
  EXPECT_EQ(listed_leaked, leaked);

  Result<ReclaimOutcome> out = agent.Reclaim(/*dry_run=*/false, "", "", {});
  ASSERT_TRUE(out.ok());
  std::set<std::string> removed;
  for (const LeakRecord& l : out->reclaimed) removed.insert(l.path);
  for (const SkippedLeak& k : out->skipped) {
    EXPECT_FALSE(leaked.count(k.leak.path))
        << k.leak.path << " kept: " << SkipReasonName(k.reason) << ": " << k.message;
  }
  EXPECT_EQ(removed, leaked);
  for (const std::string& h : held) EXPECT_EQ(::access(h.c_str(), F_OK), 0) << "held segment removed: " << h;
  for (const std::string& l : leaked) EXPECT_NE(::access(l.c_str(), F_OK), 0) << "leak left: " << l;
  RecordProperty("files", kFiles);
  RecordProperty("leaked", static_cast<int>(leaked.size()));
  RecordProperty("held", static_cast<int>(held.size()));

  for (Child& c : creators) {
    if (c.alive) Kill(&c);
  }
  for (Child& h : holders) {
    if (h.alive) Kill(&h);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, AgentProperty, ::testing::Values(1u, 2u, 3u, 4u, 5u));

}  // namespace
}  // namespace shmkeeper
