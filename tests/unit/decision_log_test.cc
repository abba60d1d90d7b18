#include "decide/decision_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(DecisionLogRotation, ZeroNeverRotates) {
  test::TempDir dir("/tmp/shmk-log-");
  ASSERT_TRUE(dir.ok());
  std::string path = dir / "runtime.log";
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(AppendJsonLine(path, Json{{"i", i}}, LogLevel::kInfo, LogLevel::kInfo, {0, 3}).ok());
  }
  EXPECT_EQ(Lines(path).size(), 50u);
  EXPECT_NE(::access((path + ".1").c_str(), F_OK), 0);
}

TEST(DecisionLogRotation, KeepsAtMostMaxFiles) {
  test::TempDir dir("/tmp/shmk-log-");
  ASSERT_TRUE(dir.ok());
  std::string path = dir / "runtime.log";
  // Each line is ~80 bytes: a 200-byte cap rotates every third line.
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(AppendJsonLine(path, Json{{"i", i}}, LogLevel::kInfo, LogLevel::kInfo, {200, 2}).ok());
  }
  EXPECT_EQ(::access((path + ".1").c_str(), F_OK), 0);
  EXPECT_EQ(::access((path + ".2").c_str(), F_OK), 0);
  EXPECT_NE(::access((path + ".3").c_str(), F_OK), 0);
  // The newest line is in the live file or, when it just rotated, in .1.
  std::vector<std::string> live = Lines(path), one = Lines(path + ".1");
  std::string last = live.empty() ? one.back() : live.back();
  EXPECT_EQ(Json::parse(last)["i"], 59);
  // No file grows past the cap by more than the line that reached it (the
  // live file is absent when the last write rotated it).
  for (const char* suffix : {"", ".1", ".2"}) {
    struct stat st;
    if (::stat((path + suffix).c_str(), &st) == 0) {
      EXPECT_LT(st.st_size, 200 + 100) << suffix;
    }
  }
}

// Many processes append at once with a small cap: rotation happens, and
// every line is in exactly one file, whole.
TEST(DecisionLogRotation, ConcurrentWritersLoseAndTearNothing) {
  test::TempDir dir("/tmp/shmk-log-");
  ASSERT_TRUE(dir.ok());
  std::string path = dir / "runtime.log";
  constexpr int kWriters = 8, kLines = 300, kFiles = 60;
  constexpr int64_t kCap = 8 << 10;
  // ~8*300*100 bytes = ~240 KB over at most 61 files of >= 8 KiB: nothing
  // can fall off the end, so every line must be found.
  const LogRotation rotation{kCap, kFiles};
  std::string pad(60, 'x');
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      for (int i = 0; i < kLines; ++i) {
        Json rec = {{"w", w}, {"i", i}, {"pad", pad}};
        if (!AppendJsonLine(path, rec, LogLevel::kInfo, LogLevel::kInfo, rotation).ok()) ++bad;
      }
      ::_exit(bad == 0 ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::set<std::pair<int, int>> seen;
  int rotated = 0, lines = 0;
  for (int f = 0; f <= kFiles + 1; ++f) {
    std::string p = f == 0 ? path : path + "." + std::to_string(f);
    if (::access(p.c_str(), F_OK) != 0) continue;
    if (f > 0) {
      ++rotated;
      // Only a file that reached the cap is rotated, and only once: a second
      // writer rotating the fresh file would leave a short one here.
      struct stat st;
      ASSERT_EQ(::stat(p.c_str(), &st), 0);
      EXPECT_GE(st.st_size, kCap) << p;
    }
    for (const std::string& line : Lines(p)) {
      ++lines;
      Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << "torn line in " << p << ": " << line;
      EXPECT_EQ(j["pad"], pad);
      EXPECT_TRUE(seen.insert({j["w"].get<int>(), j["i"].get<int>()}).second) << line;
    }
  }
  EXPECT_GE(rotated, 10);  // positive control: rotation really happened
  EXPECT_LT(rotated, kFiles);
  EXPECT_EQ(lines, kWriters * kLines);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kWriters * kLines));
}

}  // namespace
}  // namespace shmkeeper
