#include "install/containerd_template.h"

#include <gtest/gtest.h>

#include <string>

namespace shmkeeper {
namespace {

ContainerdInstallOptions Opts() {
  ContainerdInstallOptions o;
  o.runtime_path = "/opt/shmkeeper/bin/shmkeeper-runtime";
  return o;
}

constexpr const char* kRenderedV3 =
    "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = "
    "true\n";

TEST(ContainerdTemplateTest, NewTemplateIncludesTheBaseAndAppendsTheHandler) {
  Result<std::string> t = WithContainerdTemplateRuntime("", kRenderedV3, "config.toml", Opts());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->rfind(kContainerdBaseTemplate, 0), 0u) << *t;
  EXPECT_NE(t->find("[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.shmkeeper]"), std::string::npos);
  EXPECT_NE(t->find("BinaryName = '/opt/shmkeeper/bin/shmkeeper-runtime'"), std::string::npos);
  EXPECT_NE(t->find("SystemdCgroup = true"), std::string::npos);  // the default handler's options
  EXPECT_EQ(t->find("{{", 1), std::string::npos);                 // no action but the base's
  EXPECT_EQ(WithoutShmkeeperLines(*t), kContainerdBaseTemplate);
}

TEST(ContainerdTemplateTest, UsersTemplateKeepsItsBytesAndIsIdempotent) {
  const std::string users = "{{ template \"base\" . }}\n[plugins.'io.containerd.cri.v1.images'.registry] # mine";
  // The rendered config may already hold the block (rendered from our template): it is replaced, not doubled.
  Result<std::string> once = WithContainerdTemplateRuntime(users, kRenderedV3, "config.toml", Opts());
  ASSERT_TRUE(once.ok()) << once.status().message();
  EXPECT_EQ(once->rfind(users + "\n", 0), 0u);
  Result<std::string> rendered_with_block = WithContainerdRuntime(kRenderedV3, "config.toml", Opts());
  ASSERT_TRUE(rendered_with_block.ok());
  Result<std::string> twice = WithContainerdTemplateRuntime(*once, *rendered_with_block, "config.toml", Opts());
  ASSERT_TRUE(twice.ok()) << twice.status().message();
  EXPECT_EQ(*twice, *once);
  EXPECT_EQ(WithoutShmkeeperLines(*once), users + "\n");
}

TEST(ContainerdTemplateTest, RefusesWhatATemplateCannotHold) {
  ContainerdInstallOptions o = Opts();
  o.set_as_default = true;
  Result<std::string> t = WithContainerdTemplateRuntime("", kRenderedV3, "config.toml", o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--default-runtime shmkeeper"), std::string::npos);
  o = Opts();
  o.runtime_path = "/opt/{{ .Evil }}/shmkeeper-runtime";
  EXPECT_FALSE(WithContainerdTemplateRuntime("", kRenderedV3, "config.toml", o).ok());
  // A handler of that name the user wrote: refused, as for config.toml.
  const std::string theirs = std::string(kRenderedV3) +
                             "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.shmkeeper]\n"
                             "  runtime_type = 'x'\n";
  EXPECT_FALSE(WithContainerdTemplateRuntime("", theirs, "config.toml", Opts()).ok());
  EXPECT_FALSE(WithContainerdTemplateRuntime("", "version = 3\n[broken", "config.toml", Opts()).ok());
  // The default handler's options are copied into the block: an action there would break k3s's template.
  const std::string action = std::string(kRenderedV3) + "  Root = \"/run/{{ .Evil }}\"\n";
  Result<std::string> a = WithContainerdTemplateRuntime("", action, "config.toml", Opts());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("template would read as an action"), std::string::npos);
}

}  // namespace
}  // namespace shmkeeper
