#include "kube/node_label.h"

#include <gtest/gtest.h>

#include <string>

namespace shmkeeper {
namespace {

TEST(NodeLabelTest, PatchBodyIsAMergePatchOfTheLabel) {
  EXPECT_EQ(NodeLabelPatch("shmkeeper.io/runtime", std::string("ready")),
            "{\"metadata\":{\"labels\":{\"shmkeeper.io/runtime\":\"ready\"}}}");
  EXPECT_EQ(NodeLabelPatch("shmkeeper.io/runtime", std::nullopt),
            "{\"metadata\":{\"labels\":{\"shmkeeper.io/runtime\":null}}}");
}

TEST(NodeLabelTest, NamesAndLabelsAreCheckedAsTheApiServerDoes) {
  for (const char* ok : {"node-1", "ip-10-0-0-1.ec2.internal", "a"}) EXPECT_TRUE(CheckNodeName(ok).ok()) << ok;
  // Path and query injection, upper case, empty, too long.
  for (const char* bad : {"", "Node", "a/../../namespaces", "a?x=1", "a b", "-a", "a..b", "a.", "%2e"}) {
    EXPECT_FALSE(CheckNodeName(bad).ok()) << bad;
  }
  EXPECT_FALSE(CheckNodeName(std::string(254, 'a')).ok());
  EXPECT_TRUE(CheckLabel("shmkeeper.io/runtime", "ready").ok());
  EXPECT_TRUE(CheckLabel("ready", "").ok());
  EXPECT_FALSE(CheckLabel("shmkeeper.io/", "ready").ok());
  EXPECT_FALSE(CheckLabel("Bad_Prefix/x", "ready").ok());
  EXPECT_FALSE(CheckLabel("shmkeeper.io/runtime", "not ok").ok());
  EXPECT_FALSE(CheckLabel("shmkeeper.io/runtime", std::string(64, 'a')).ok());
}

TEST(NodeLabelTest, InClusterApiNeedsAnHttpsServerATokenAndTheCa) {
  EXPECT_FALSE(InClusterApi("/nonexistent", "http://127.0.0.1:6443").ok());  // TLS only
  EXPECT_FALSE(InClusterApi("/nonexistent", "https://127.0.0.1:99999").ok());
  Result<KubeApi> api = InClusterApi("/nonexistent", "https://127.0.0.1:6443");
  ASSERT_FALSE(api.ok());  // no token file
}

}  // namespace
}  // namespace shmkeeper
