#include "decide/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/json.h"

namespace shmkeeper {
namespace {

TEST(Config, EmptyDocumentGivesDefaults) {
  Result<Config> c = ParseConfig("", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->shm.default_bytes);
  EXPECT_FALSE(c->shm.max_bytes);
  EXPECT_EQ(c->shm.over_max, OverMax::kReject);
  EXPECT_EQ(c->on_internal_error, OnInternalError::kPassthrough);
  EXPECT_EQ(c->runtime.path, "");
  EXPECT_EQ(c->log.path, "/var/log/shmkeeper/runtime.log");
  EXPECT_EQ(c->log.level, LogLevel::kInfo);
  EXPECT_EQ(c->log.max_bytes, 10 << 20);
  EXPECT_EQ(c->log.max_files, 3);
  EXPECT_FALSE(c->preload.reserve);  // no up-front commit unless asked for
}

TEST(Config, PreloadReserveIsABool) {
  Result<Config> c = ParseConfig("preload:\n  reserve: true\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->preload.reserve);
  EXPECT_EQ(ConfigToJson(*c)["preload"]["reserve"], true);
  Result<Config> bad = ParseConfig("preload:\n  reserve: sometimes\n", "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("preload.reserve"), std::string::npos) << bad.status().message();
}

TEST(Config, CudaIpcIsOffUnlessTheNodeAllowsIt) {
  Result<Config> c = ParseConfig("", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->cuda.ipc, CudaIpc::kOff);
  EXPECT_EQ(ConfigToJson(*c)["cuda"]["ipc"], "off");
  c = ParseConfig("cuda:\n  ipc: allocated\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->cuda.ipc, CudaIpc::kAllocated);
  EXPECT_EQ(ConfigToJson(*c)["cuda"]["ipc"], "allocated");
  Result<Config> bad = ParseConfig("cuda:\n  ipc: all\n", "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("key 'cuda.ipc': \"all\" is not one of off, allocated"), std::string::npos)
      << bad.status().message();
}

TEST(Config, FullDocument) {
  Result<Config> c = ParseConfig(R"(
# node policy
shm:
  default: 1Gi
  max: 8Gi
  overMax: clamp
onInternalError: fail
runtime:
  path: /usr/sbin/runc
log:
  path: /tmp/x.log
  level: debug
  maxSize: 64Mi
  maxFiles: 5
)",
                                 "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->shm.default_bytes, kGiB);
  EXPECT_EQ(c->shm.max_bytes, 8 * kGiB);
  EXPECT_EQ(c->shm.over_max, OverMax::kClamp);
  EXPECT_EQ(c->on_internal_error, OnInternalError::kFail);
  EXPECT_EQ(c->runtime.path, "/usr/sbin/runc");
  EXPECT_EQ(c->log.path, "/tmp/x.log");
  EXPECT_EQ(c->log.level, LogLevel::kDebug);
  EXPECT_EQ(c->log.max_bytes, 64 << 20);
  EXPECT_EQ(c->log.max_files, 5);
  Result<Config> never = ParseConfig("log:\n  maxSize: 0\n", "c.yaml");
  ASSERT_TRUE(never.ok()) << never.status().message();
  EXPECT_EQ(never->log.max_bytes, 0);
}

TEST(Config, AutoKeywords) {
  Result<Config> c = ParseConfig("shm: {default: auto, max: auto}\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->shm.default_bytes);
  EXPECT_FALSE(c->shm.max_bytes);
}

struct BadCase {
  const char* yaml;
  const char* expect;  // substring of the error
};

class ConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigBad, NamesFileLineAndKey) {
  Result<Config> c = ParseConfig(GetParam().yaml, "/etc/shmkeeper/config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find(GetParam().expect), std::string::npos) << c.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigBad,
    ::testing::Values(BadCase{"shm:\n  defualt: 1Gi\n", "/etc/shmkeeper/config.yaml:2:3: unknown key 'shm.defualt'"},
                      BadCase{"shmm: {}\n", "config.yaml:1:1: unknown key 'shmm'"},
                      BadCase{"shm:\n  max: lots\n", "config.yaml:2:8: key 'shm.max': invalid size \"lots\""},
                      BadCase{"shm:\n  default: -1\n", "key 'shm.default': invalid size \"-1\""},
                      BadCase{"shm:\n  overMax: maybe\n", "key 'shm.overMax': \"maybe\" is not one of reject, clamp"},
                      BadCase{"onInternalError: ignore\n", "key 'onInternalError'"},
                      BadCase{"log:\n  level: loud\n", "key 'log.level'"},
                      BadCase{"log:\n  maxSize: big\n", "key 'log.maxSize': invalid size \"big\""},
                      BadCase{"log:\n  maxFiles: 0\n", "key 'log.maxFiles': \"0\" is not a number from 1 to 9"},
                      BadCase{"runtime:\n  path: runc\n", "key 'runtime.path': must be an absolute path"},
                      BadCase{"shm: 5\n", "key 'shm': expected a mapping"},
                      BadCase{"shm:\n  max: [1, 2]\n", "key 'shm.max': expected a scalar value"},
                      BadCase{"shm:\n  default: 2Gi\n  max: 1Gi\n",
                              "config.yaml:2:12: key 'shm.default': 2GiB is larger than shm.max 1GiB"},
                      BadCase{"shm:\n  max: 1Gi\n  max: 2Gi\n", "config.yaml:3:3: duplicate key 'shm.max'"},
                      BadCase{"- a\n- b\n", "the document must be a mapping"},
                      BadCase{"shm: {max: 1Gi\n", "config.yaml:"}, BadCase{"\x01\x02\xff", "config.yaml"}));

TEST(Config, MissingFileUsesDefaultsUnlessRequired) {
  EXPECT_TRUE(LoadConfig("/nonexistent/shmkeeper.yaml", false).ok());
  Result<Config> c = LoadConfig("/nonexistent/shmkeeper.yaml", true);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/shmkeeper.yaml"), std::string::npos);
}

TEST(Config, ResolvePathPrecedence) {
  ::unsetenv(kConfigEnv);
  EXPECT_EQ(ResolveConfigPath(""), kDefaultConfigPath);
  ::setenv(kConfigEnv, "/env.yaml", 1);
  EXPECT_EQ(ResolveConfigPath(""), "/env.yaml");
  EXPECT_EQ(ResolveConfigPath("/flag.yaml"), "/flag.yaml");
  ::unsetenv(kConfigEnv);
}

TEST(Config, ShippedExampleParses) {
  Result<Config> c = LoadConfig(SHMKEEPER_SOURCE_DIR "/deploy/config/config.yaml", true);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(ConfigToJson(*c)["shm"]["default"], "auto");
  EXPECT_FALSE(c->preload.reserve);
}

}  // namespace
}  // namespace shmkeeper

namespace shmkeeper {
namespace {

// Found by fuzz_config: a path that is not UTF-8 must not make logging throw.
TEST(Config, NonUtf8ValuesSerializeWithoutThrowing) {
  Result<Config> c = ParseConfig("log:\n  path: /tmp/\x91x\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NO_THROW((void)DumpJson(ConfigToJson(*c)));
}

}  // namespace
}  // namespace shmkeeper

namespace shmkeeper {
namespace {

TEST(Config, MetricsListenerLimitsAndProtection) {
  Result<Config> c = ParseConfig(R"(
agent:
  maxWatchStreams: 3
  metrics:
    maxConnections: 16
    maxConnectionsPerClient: 2
    headerTimeout: 2s
    idleTimeout: 500ms
    writeTimeout: 1m
    certFile: /etc/shmkeeper/tls.crt
    keyFile: /etc/shmkeeper/tls.key
    clientCAFile: /etc/shmkeeper/ca.crt
    bearerTokenFile: /var/run/secrets/token
)",
                                 "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->agent.max_watch_streams, 3);
  EXPECT_EQ(c->agent.metrics.max_connections, 16);
  EXPECT_EQ(c->agent.metrics.max_connections_per_client, 2);
  EXPECT_EQ(c->agent.metrics.header_timeout, std::chrono::seconds(2));
  EXPECT_EQ(c->agent.metrics.idle_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->agent.metrics.write_timeout, std::chrono::minutes(1));
  EXPECT_EQ(c->agent.metrics.bearer_token_file, "/var/run/secrets/token");
  for (const char* bad : {"agent: {maxWatchStreams: 0}\n", "agent: {metrics: {maxConnections: many}}\n",
                          "agent: {metrics: {maxConnections: 4}}\n",  // below the per-client default of 8
                          "agent: {metrics: {certFile: /a.crt}}\n", "agent: {metrics: {clientCAFile: /ca.crt}}\n",
                          "agent: {metrics: {headerTimeout: 0s}}\n"}) {
    Result<Config> r = ParseConfig(bad, "c.yaml");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("c.yaml:"), std::string::npos) << r.status().message();
    }
  }
}

}  // namespace
}  // namespace shmkeeper

namespace shmkeeper {
namespace {

// agent.maxFilesPerPod (issue 35, "bounded per pod"): a stated default, a
// value in range taken, absurd ones refused with one line naming the place.
TEST(Config, MaxFilesPerPod) {
  Result<Config> d = ParseConfig("", "c.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->agent.max_files_per_pod, 10000);
  Result<Config> c = ParseConfig("agent:\n  maxFilesPerPod: 500\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->agent.max_files_per_pod, 500);
  EXPECT_EQ(ConfigToJson(*c)["agent"]["maxFilesPerPod"], 500);
  for (const char* bad :
       {"agent: {maxFilesPerPod: 0}\n", "agent: {maxFilesPerPod: -1}\n", "agent: {maxFilesPerPod: 100001}\n",
        "agent: {maxFilesPerPod: 1e9}\n", "agent: {maxFilesPerPod: lots}\n"}) {
    Result<Config> r = ParseConfig(bad, "c.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("c.yaml:1:"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("from 1 to 100000"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace shmkeeper
