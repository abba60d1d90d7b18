#include "install/containerd_config.h"

#include <gtest/gtest.h>

#include <string>

namespace shmkeeper {
namespace {

ContainerdInstallOptions Opts(bool set_default) {
  ContainerdInstallOptions o;
  o.runtime_path = "/usr/local/bin/shmkeeper-runtime";
  o.set_as_default = set_default;
  return o;
}

struct RoundTrip {
  const char* name;
  std::string original;
  bool set_default;
  std::string must_contain;  // in the installed text
};

// Install then uninstall gives the original bytes back; a second install
// changes nothing.
TEST(ContainerdConfigTest, InstallIsIdempotentAndUninstallRestoresTheBytes) {
  const RoundTrip cases[] = {
      {"debian default", "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n", false,
       "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.shmkeeper]"},
      {"default rewritten",
       "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\" # c\n", true,
       "default_runtime_name = \"shmkeeper\" # c  # shmkeeper-was:   default_runtime_name = \"runc\" # c"},
      {"default inserted", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"x\"\n",
       true, "default_runtime_name = \"shmkeeper\"  # shmkeeper-inserted"},
      {"default in block", "version = 2\n", true, "default_runtime_name = 'shmkeeper'"},
      {"runc options copied",
       "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = "
       "true\n",
       false, "SystemdCgroup = true"},
      {"crlf", "version = 2\r\n# note\r\n", false, "# <<< shmkeeper\r\n"},
      {"version 3", "version = 3\n", true, "[plugins.'io.containerd.cri.v1.runtime'.containerd]"},
  };
  for (const RoundTrip& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::string> installed = WithContainerdRuntime(c.original, "config.toml", Opts(c.set_default));
    ASSERT_TRUE(installed.ok()) << installed.status().message();
    EXPECT_NE(installed->find(c.must_contain), std::string::npos) << *installed;
    EXPECT_EQ(installed->find("BinaryName = '/usr/local/bin/shmkeeper-runtime'") != std::string::npos, true);
    Result<std::string> again = WithContainerdRuntime(*installed, "config.toml", Opts(c.set_default));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *installed);
    Result<std::string> removed = WithoutContainerdRuntime(*installed, "config.toml");
    ASSERT_TRUE(removed.ok());
    EXPECT_EQ(*removed, c.original);
  }
}

TEST(ContainerdConfigTest, RefusesWhatItCannotEditSafely) {
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {"version = 2\n[plugins\n", "config.toml:2:"},
      {"[plugins.cri]\n", "containerd config version 1 is not supported"},
      {"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.shmkeeper]\n",
       "config.toml:2: runtime handler \"shmkeeper\" exists and was not added by shmkeeper"},
      // containerd defined by dotted keys: a header for it would redefine it.
      {"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd.snapshotter = \"x\"\n",
       "cannot be added without changing other settings"},
  };
  for (const auto& c : cases) {
    Result<std::string> r = WithContainerdRuntime(c.text, "config.toml", Opts(true));
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status().message();
  }
  ContainerdInstallOptions bad = Opts(false);
  bad.runtime_name = "a b";
  EXPECT_FALSE(WithContainerdRuntime("version = 2\n", "config.toml", bad).ok());
}

TEST(ContainerdConfigTest, GrpcAddressIsReadFromTheFile) {
  EXPECT_EQ(ContainerdGrpcAddress("version = 2\n[grpc]\n  address = \"/run/k3s/containerd/containerd.sock\"\n"),
            "/run/k3s/containerd/containerd.sock");
  EXPECT_EQ(ContainerdGrpcAddress("version = 2\n"), "");          // unset: containerd's default
  EXPECT_EQ(ContainerdGrpcAddress("version = 2\n[grpc\n"), "");   // unparsable
  EXPECT_EQ(ContainerdGrpcAddress("[grpc]\naddress = 3\n"), "");  // not a string
}

}  // namespace
}  // namespace shmkeeper
