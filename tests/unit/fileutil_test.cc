#include "base/fileutil.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

TEST(FileUtil, AtomicWriteKeepsModeAndLeavesNoTemp) {
  test::TempDir dir("/tmp/shmk-fu-");
  ASSERT_TRUE(dir.ok());
  std::string p = dir / "f";
  ASSERT_TRUE(WriteFileAtomic(p, "one", 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFileAtomic(p, "two", 0644).ok());  // existing mode kept
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(*ReadFile(p), "two");
  // A write into a missing directory fails and creates nothing.
  EXPECT_FALSE(WriteFileAtomic(dir / "no/f", "x").ok());
  ::unlink(p.c_str());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // no temp file left behind
}

TEST(FileUtil, ReadLimits) {
  EXPECT_EQ(ReadFile("/nonexistent").status().code(), Code::kNotFound);
  EXPECT_FALSE(ReadFile("/proc/self/status", 10).ok());
}

}  // namespace
}  // namespace shmkeeper
