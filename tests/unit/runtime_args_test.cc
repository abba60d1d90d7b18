#include "decide/runtime_args.h"

#include <gtest/gtest.h>

namespace shmkeeper {
namespace {

using Args = std::vector<std::string>;

TEST(RuntimeArgs, DockerCreate) {
  Args a = {"--root",       "/run/docker/runtime-runc/moby",
            "--log",        "/b/log.json",
            "--log-format", "json",
            "create",       "--bundle",
            "/b",           "--pid-file",
            "/b/init.pid",  "cid"};
  Result<RuntimeArgs> r = ParseRuntimeArgs(a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->subcommand, "create");
  EXPECT_TRUE(r->Intercepts());
  EXPECT_EQ(r->bundle, "/b");
  EXPECT_EQ(r->container_id, "cid");
  EXPECT_EQ(r->log_path, "/b/log.json");
  EXPECT_EQ(r->log_format, "json");
  EXPECT_EQ(r->root, "/run/docker/runtime-runc/moby");
  EXPECT_EQ(r->passthrough, a);
}

TEST(RuntimeArgs, FlagForms) {
  struct Case {
    Args args;
    std::string bundle, id;
  } cases[] = {
      {{"create", "-b", "/x", "id1"}, "/x", "id1"},
      {{"create", "--bundle=/y", "id2"}, "/y", "id2"},
      {{"create", "-b=/z", "--console-socket", "/s.sock", "id3"}, "/z", "id3"},
      {{"--systemd-cgroup", "run", "-d", "--bundle", "/w", "--preserve-fds", "2", "id4"}, "/w", "id4"},
      {{"create", "id5"}, "", "id5"},
      {{"--root=/r", "create", "-bundle", "/v", "id6"}, "/v", "id6"},
  };
  for (const Case& c : cases) {
    Result<RuntimeArgs> r = ParseRuntimeArgs(c.args);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->Intercepts());
    EXPECT_EQ(r->bundle, c.bundle);
    EXPECT_EQ(r->container_id, c.id);
    EXPECT_EQ(r->passthrough, c.args);
  }
}

TEST(RuntimeArgs, OwnConfigFlagIsStripped) {
  Result<RuntimeArgs> r = ParseRuntimeArgs({"--config", "/etc/s.yaml", "--root", "/r", "start", "id"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config_path, "/etc/s.yaml");
  EXPECT_EQ(r->passthrough, (Args{"--root", "/r", "start", "id"}));
  EXPECT_FALSE(r->Intercepts());
  r = ParseRuntimeArgs({"--config=/c.yaml", "state", "id"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config_path, "/c.yaml");
  EXPECT_EQ(r->passthrough, (Args{"state", "id"}));
}

TEST(RuntimeArgs, OtherSubcommandsPassThrough) {
  for (const Args& a :
       {Args{"delete", "--force", "id"}, Args{"--version"}, Args{}, Args{"kill", "id", "9"}, Args{"features"}}) {
    Result<RuntimeArgs> r = ParseRuntimeArgs(a);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->Intercepts());
    EXPECT_EQ(r->passthrough, a);
  }
}

TEST(RuntimeArgs, MissingValueIsAnError) {
  EXPECT_FALSE(ParseRuntimeArgs({"--root"}).ok());
  EXPECT_FALSE(ParseRuntimeArgs({"create", "--bundle"}).ok());
}

}  // namespace
}  // namespace shmkeeper
