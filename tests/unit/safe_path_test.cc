#include "base/safe_path.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

namespace fs = std::filesystem;

class SafePath : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    root_ = tmp_.path();
    root_fd_ = UniqueFd(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_.valid());
  }
  test::TempDir tmp_{"/tmp/shmk-safe-path-"};
  std::string root_;
  UniqueFd root_fd_;
};

TEST(NormalizePath, IsLexical) {
  EXPECT_EQ(NormalizePath(""), "/");
  EXPECT_EQ(NormalizePath("/"), "/");
  EXPECT_EQ(NormalizePath("run//shmkeeper/"), "/run/shmkeeper");
  EXPECT_EQ(NormalizePath("/run/./x/../shmkeeper"), "/run/shmkeeper");
  EXPECT_EQ(NormalizePath("/../../run"), "/run");
}

TEST_F(SafePath, MakeDirsCreatesAndRefusesSymlinksAnywhere) {
  Result<UniqueFd> d = MakeDirsNoSymlinks(root_fd_.get(), "/run/shmkeeper");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(fs::is_directory(root_ + "/run/shmkeeper"));
  EXPECT_TRUE(MakeDirsNoSymlinks(root_fd_.get(), "/run/shmkeeper").ok());  // existing is fine
  fs::create_directory_symlink(root_ + "/run", root_ + "/var");
  Result<UniqueFd> through = MakeDirsNoSymlinks(root_fd_.get(), "/var/x");
  ASSERT_FALSE(through.ok());
  EXPECT_EQ(through.status().message(), "/var is not a plain directory: Too many levels of symbolic links");
  EXPECT_FALSE(fs::exists(root_ + "/run/x"));
}

TEST_F(SafePath, MakeFileRefusesSymlinksAndNonFiles) {
  Result<UniqueFd> d = MakeDirsNoSymlinks(root_fd_.get(), "/d");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(MakeFileNoSymlinks(d->get(), "lib.so").ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/d/lib.so"));
  EXPECT_TRUE(MakeFileNoSymlinks(d->get(), "lib.so").ok());
  fs::create_symlink("/etc/passwd", root_ + "/d/link");
  EXPECT_FALSE(MakeFileNoSymlinks(d->get(), "link").ok());
  fs::create_symlink("nowhere", root_ + "/d/dangling");
  EXPECT_FALSE(MakeFileNoSymlinks(d->get(), "dangling").ok());
  EXPECT_FALSE(fs::exists(root_ + "/d/nowhere"));
  ASSERT_EQ(::mkfifo((root_ + "/d/fifo").c_str(), 0600), 0);
  EXPECT_EQ(MakeFileNoSymlinks(d->get(), "fifo").message(), "fifo is not a plain file");  // never opened for real
  fs::create_directory(root_ + "/d/dir");
  EXPECT_FALSE(MakeFileNoSymlinks(d->get(), "dir").ok());
}

TEST_F(SafePath, LandingPathResolvesTheImagesSymlinksInsideIt) {
  fs::create_directories(root_ + "/run");
  fs::create_directories(root_ + "/var");
  fs::create_directory_symlink("/run", root_ + "/var/run");            // absolute: resolved in the root
  fs::create_directory_symlink("../../../..", root_ + "/run/escape");  // clamped at the root
  std::string host = fs::canonical(root_);
  EXPECT_EQ(LandingPath(root_fd_.get(), host, "/var/run"), "/run");
  EXPECT_EQ(LandingPath(root_fd_.get(), host, "/var/run/shmkeeper/x"), "/run/shmkeeper/x");
  EXPECT_EQ(LandingPath(root_fd_.get(), host, "/var/./run/"), "/run");
  EXPECT_EQ(LandingPath(root_fd_.get(), host, "/run/escape/run"), "/run");
  EXPECT_EQ(LandingPath(root_fd_.get(), host, "/nothing/here"), "/nothing/here");
}

// A root whose path is "/" (the NRI plugin's image: an overlay attached
// nowhere, whose fds read back as "/..."): every path is below it.
TEST_F(SafePath, LandingPathUnderARootAtSlash) {
  fs::create_directories(root_ + "/run");
  fs::create_directories(root_ + "/var");
  fs::create_directory_symlink("../run", root_ + "/var/run");
  UniqueFd slash(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(slash.valid());
  std::string image = fs::canonical(root_).string();
  // Resolved (the lexical path came back before: "/" + "/" never prefixed anything).
  EXPECT_EQ(LandingPath(slash.get(), "/", image + "/var/run/x"), image + "/run/x");
  EXPECT_EQ(LandingPath(slash.get(), "/", "/nothing/here"), "/nothing/here");
}

}  // namespace
}  // namespace shmkeeper
