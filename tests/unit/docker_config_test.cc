#include "install/docker_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "base/fileutil.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

class DockerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    opts_.daemon_json = dir_ + "/daemon.json";
    opts_.runtime_path = "/usr/local/bin/shmkeeper-runtime";
  }
  test::TempDir tmp_{"/tmp/shmk-dc-"};
  std::string dir_;
  DockerInstallOptions opts_;
};

TEST_F(DockerConfigTest, InstallKeepsKeysIsIdempotentAndUninstallRestoresBytes) {
  std::string original =
      "{\"log-level\": \"warn\",\n \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}},\n "
      "\"default-runtime\": \"nvidia\"}\n";
  ASSERT_TRUE(WriteFileAtomic(opts_.daemon_json, original).ok());
  opts_.set_as_default = true;
  Result<ConfigChange> c = InstallDocker(opts_);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->changed);
  Json j = Json::parse(*ReadFile(opts_.daemon_json));
  EXPECT_EQ(j["log-level"], "warn");
  EXPECT_EQ(j["runtimes"]["nvidia"]["path"], "nvidia-container-runtime");
  EXPECT_EQ(j["runtimes"]["shmkeeper"]["path"], opts_.runtime_path);
  EXPECT_EQ(j["default-runtime"], "shmkeeper");
  EXPECT_EQ(*ReadFile(DockerBackupPath(opts_.daemon_json)), original);
  std::string installed = *ReadFile(opts_.daemon_json);
  c = InstallDocker(opts_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->changed);
  EXPECT_EQ(*ReadFile(opts_.daemon_json), installed);
  c = UninstallDocker(opts_);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->changed);
  EXPECT_EQ(*ReadFile(opts_.daemon_json), original);
  EXPECT_FALSE(PathExists(DockerBackupPath(opts_.daemon_json)));
  c = UninstallDocker(opts_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->changed);
}

TEST_F(DockerConfigTest, AbsentFileIsCreatedAndRemovedAgain) {
  opts_.runtime_config = "/etc/shmkeeper/x.yaml";
  ASSERT_TRUE(InstallDocker(opts_).ok());
  Json j = Json::parse(*ReadFile(opts_.daemon_json));
  EXPECT_EQ(j["runtimes"]["shmkeeper"]["runtimeArgs"], Json::array({"--config", "/etc/shmkeeper/x.yaml"}));
  EXPECT_FALSE(j.contains("default-runtime"));
  ASSERT_TRUE(UninstallDocker(opts_).ok());
  EXPECT_FALSE(PathExists(opts_.daemon_json));
  EXPECT_FALSE(PathExists(DockerAbsentMarkerPath(opts_.daemon_json)));
}

TEST_F(DockerConfigTest, UninstallKeepsLaterUserEdits) {
  ASSERT_TRUE(WriteFileAtomic(opts_.daemon_json, "{\"debug\": true}").ok());
  opts_.set_as_default = true;
  ASSERT_TRUE(InstallDocker(opts_).ok());
  Json j = Json::parse(*ReadFile(opts_.daemon_json));
  j["max-concurrent-downloads"] = 5;
  ASSERT_TRUE(WriteFileAtomic(opts_.daemon_json, j.dump()).ok());
  ASSERT_TRUE(UninstallDocker(opts_).ok());
  EXPECT_EQ(Json::parse(*ReadFile(opts_.daemon_json)), (Json{{"debug", true}, {"max-concurrent-downloads", 5}}));
}

TEST_F(DockerConfigTest, DryRunWritesNothing) {
  opts_.dry_run = true;
  Result<ConfigChange> c = InstallDocker(opts_);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->changed);
  EXPECT_NE(c->after.find("shmkeeper-runtime"), std::string::npos);
  EXPECT_FALSE(PathExists(opts_.daemon_json));
  EXPECT_FALSE(PathExists(DockerAbsentMarkerPath(opts_.daemon_json)));
}

TEST_F(DockerConfigTest, BadFilesAreRejectedAndUntouched) {
  for (std::string bad : {"{\"a\": ", "[1,2]", "\x01\x02", "{\"a\":1}{"}) {
    ASSERT_TRUE(WriteFileAtomic(opts_.daemon_json, bad).ok());
    Result<ConfigChange> c = InstallDocker(opts_);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find(opts_.daemon_json), std::string::npos);
    EXPECT_EQ(*ReadFile(opts_.daemon_json), bad);
    EXPECT_FALSE(PathExists(DockerBackupPath(opts_.daemon_json)));
  }
  opts_.runtime_path = "relative/shmkeeper-runtime";
  EXPECT_FALSE(InstallDocker(opts_).ok());
}

}  // namespace
}  // namespace shmkeeper
