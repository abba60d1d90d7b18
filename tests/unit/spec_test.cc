#include "decide/spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "support/temp_dir.h"

namespace shmkeeper {
namespace {

constexpr const char* kDockerSpec = R"({
  "ociVersion": "1.0.2-dev",
  "process": {"env": ["PATH=/bin", "SHMKEEPER_SHM_SIZE=1g", "SHMKEEPER_SHM_SIZE=2g"], "futureField": {"x": [1, 2.5, null]}},
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=67108864"]}
  ],
  "annotations": {"shmkeeper.io/shm-size": "2Gi", "n": 5},
  "linux": {"resources": {"memory": {"limit": 1073741824}}, "namespaces": [{"type": "pid"}, {"type": "ipc", "path": "/proc/1/ns/ipc"}]},
  "zzz": 18446744073709551615
})";

TEST(Spec, Accessors) {
  Result<Spec> s = Spec::Parse(kDockerSpec, "/b/config.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->Annotation("shmkeeper.io/shm-size"), "2Gi");
  EXPECT_EQ(s->Annotation("n"), std::nullopt);  // not a string
  EXPECT_EQ(s->Annotation("missing"), std::nullopt);
  EXPECT_EQ(s->Env("SHMKEEPER_SHM_SIZE"), "2g");  // last wins
  EXPECT_EQ(s->Env("SHMKEEPER_SHM"), std::nullopt);
  EXPECT_EQ(s->MemoryLimit(), kGiB);
  EXPECT_EQ(s->Namespace("pid"), "");
  EXPECT_EQ(s->Namespace("ipc"), "/proc/1/ns/ipc");
  EXPECT_EQ(s->Namespace("net"), std::nullopt);
  EXPECT_EQ(s->FindMount("/dev/shm/"), 1u);
  EXPECT_EQ(s->FindMount("/tmp"), std::nullopt);
  EXPECT_EQ(s->MountSizeOption(1), 64 * kMiB);
}

TEST(Spec, SizeEditKeepsEverythingElse) {
  Result<Spec> s = Spec::Parse(kDockerSpec, "/b/config.json");
  ASSERT_TRUE(s.ok());
  Json before = Json::parse(kDockerSpec);
  s->SetMountSizeOption(1, 2 * kGiB);
  Json after = Json::parse(s->Dump());
  EXPECT_EQ(after["mounts"][1]["options"][4], "size=2147483648");
  after["mounts"][1]["options"][4] = "size=67108864";
  EXPECT_EQ(after, before);  // unknown fields, big numbers, order: all survive
  EXPECT_EQ(after.begin().key(), "ociVersion");
  EXPECT_EQ(after["zzz"].get<uint64_t>(), 18446744073709551615u);
}

TEST(Spec, SizeOptionAppendedWhenMissing) {
  Result<Spec> s = Spec::Parse(R"({"mounts":[{"destination":"/dev/shm","type":"tmpfs","source":"shm"}]})", "x");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->MountSizeOption(0), std::nullopt);
  s->SetMountSizeOption(0, kGiB);
  EXPECT_EQ(s->MountSizeOption(0), kGiB);
}

TEST(Spec, RejectsNonSpecs) {
  for (const char* bad : {"", "[]", "{", "{\"mounts\": 5}", "null", "\"x\""}) {
    Result<Spec> s = Spec::Parse(bad, "/b/config.json");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("/b/config.json"), std::string::npos);
  }
}

// Members shmkeeper edits must have their OCI type, so no edit can throw.
TEST(Spec, RejectsMembersOfTheWrongType) {
  const struct {
    const char* text;
    const char* member;
  } cases[] = {
      {R"({"process": "sh"})", "\"process\" is not an object"},
      {R"({"process": {"env": "A=1"}})", "\"process.env\" is not an array"},
      {R"({"process": {"rlimits": {}}})", "\"process.rlimits\" is not an array"},
      {R"({"annotations": []})", "\"annotations\" is not an object"},
      {R"({"linux": {"resources": {"devices": 1}}})", "\"linux.resources.devices\" is not an array"},
      {R"({"root": "/"})", "\"root\" is not an object"},
  };
  for (const auto& c : cases) {
    Result<Spec> s = Spec::Parse(c.text, "/b/config.json");
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().message(), std::string("/b/config.json: ") + c.member) << c.text;
  }
}

TEST(Spec, SaveAndLoadRoundTrip) {
  test::TempDir tmp("/tmp/shmk-spec-");
  ASSERT_TRUE(tmp.ok());
  const std::string& bundle = tmp.path();
  ASSERT_TRUE(WriteFileAtomic(bundle + "/config.json", kDockerSpec).ok());
  Result<Spec> s = Spec::Load(bundle);
  ASSERT_TRUE(s.ok()) << s.status().message();
  s->SetMountSizeOption(1, kGiB);
  ASSERT_TRUE(s->Save().ok());
  Result<Spec> again = Spec::Load(bundle);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->MountSizeOption(1), kGiB);
  EXPECT_EQ(Spec::Load(bundle + "/nope").status().code(), Code::kFailedPrecondition);  // the runtime's to judge
}

TEST(Spec, NestingIsBoundedBeforeParsing) {
  const int limit = Spec::kMaxSpecDepth;
  auto nested = [](int depth) { return "{\"x\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}"; };
  EXPECT_TRUE(Spec::Parse(nested(limit), "x").ok());
  Result<Spec> deep = Spec::Parse(nested(limit + 1), "x");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "x: nested deeper than 512 levels");
  // 200,000 levels (a stack overflow when parsed recursively) is one clear error too
  EXPECT_FALSE(Spec::Parse(nested(200000), "x").ok());
  // brackets inside strings, escaped quotes included, do not count
  EXPECT_TRUE(Spec::Parse("{\"x\":\"\\\"" + std::string(100000, '[') + "\"}", "x").ok());
}

}  // namespace
}  // namespace shmkeeper
