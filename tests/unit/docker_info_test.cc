#include "install/docker_info.h"

#include <gtest/gtest.h>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

TEST(DockerdApiSocketTest, FlagsFirstThenDaemonJsonHostsThenTheDefault) {
  EXPECT_EQ(*DockerdApiSocket({"dockerd", "-H", "unix:///run/a.sock"}, ""), "/run/a.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd", "--host=unix:///run/b.sock"}, ""), "/run/b.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd", "-H", "tcp://0.0.0.0:2376", "-H", "unix:///run/c.sock"}, ""), "/run/c.sock");
  // The socket in daemon.json's "hosts" (dockerd refuses -H and "hosts" together).
  EXPECT_EQ(*DockerdApiSocket({"dockerd", "--config-file", "/etc/d.json"},
                              R"({"hosts": ["tcp://127.0.0.1:2376", "unix:///run/d.sock"]})"),
            "/run/d.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd"}, R"({"hosts": ["unix://"]})"), "/var/run/docker.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd"}, R"({"hosts": ["fd://"]})"), "/var/run/docker.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd"}, R"({"log-level": "warn"})"), "/var/run/docker.sock");
  EXPECT_EQ(*DockerdApiSocket({"dockerd"}, ""), "/var/run/docker.sock");
}

TEST(DockerdApiSocketTest, NoUnixSocketOrABadHostsListIsAnErrorNamingIt) {
  Result<std::string> tcp = DockerdApiSocket({"dockerd"}, R"({"hosts": ["tcp://0.0.0.0:2376"]})");
  ASSERT_FALSE(tcp.ok());
  EXPECT_NE(tcp.status().message().find("listens on no unix socket (hosts: tcp://0.0.0.0:2376)"), std::string::npos)
      << tcp.status().message();
  EXPECT_FALSE(DockerdApiSocket({"dockerd"}, R"({"hosts": "unix:///run/x.sock"})").ok());
  EXPECT_FALSE(DockerdApiSocket({"dockerd"}, R"({"hosts": [1]})").ok());
  EXPECT_FALSE(DockerdApiSocket({"dockerd"}, "not json").ok());
}

TEST(ParseDockerInfoTest, AnAnswerHasAServerVersion) {
  Result<DockerInfo> info = ParseDockerInfo(
      R"({"ID":"X","ServerVersion":"28.5.2","DefaultRuntime":"shmkeeper",)"
      R"("Runtimes":{"runc":{"path":"runc"},"shmkeeper":{"path":"/usr/local/bin/shmkeeper-runtime"}}})");
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->server_version, "28.5.2");
  EXPECT_EQ(info->default_runtime, "shmkeeper");
  EXPECT_EQ(info->runtimes, (std::vector<std::string>{"runc", "shmkeeper"}));
}

// The docker CLI of Docker 22.06 and later (docker/cli's info.go, dockerInfo)
// exits 0 when it cannot reach the daemon with --format, and puts the error in
// ServerErrors next to an empty server part: the fixture is that document (the
// empty server part and ClientInfo as the 28.2.2 CLI printed them here).
TEST(ParseDockerInfoTest, ServerErrorsAreNotAnAnswer) {
  Result<std::string> text =
      ReadFile(std::string(SHMKEEPER_SOURCE_DIR) + "/tests/unit/fixtures/docker-info-unreachable.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  Result<DockerInfo> info = ParseDockerInfo(*text);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().message(),
            "docker info: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
            "running?");
}

TEST(ParseDockerInfoTest, AnEmptyServerPartOrNoObjectIsNotAnAnswer) {
  Result<DockerInfo> empty = ParseDockerInfo(R"({"ID":"","ServerVersion":"","DefaultRuntime":"","Runtimes":null})");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no daemon answered"), std::string::npos) << empty.status().message();
  EXPECT_FALSE(ParseDockerInfo("").ok());
  EXPECT_FALSE(ParseDockerInfo("[]").ok());
  EXPECT_FALSE(ParseDockerInfo(R"({"ServerVersion":"28.5.2","ServerErrors":["x"]})").ok());
}

}  // namespace
}  // namespace shmkeeper
