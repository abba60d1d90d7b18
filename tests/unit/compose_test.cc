#include "shmkeeper/compose.h"

#include <gtest/gtest.h>

namespace shmkeeper {
namespace {

TEST(Compose, Interpolate) {
  std::map<std::string, std::string> env = {{"SET", "4gb"}, {"EMPTY", ""}};
  struct Case {
    const char* in;
    const char* out;
  } cases[] = {
      {"${SET}", "4gb"},      {"$SET", "4gb"},       {"${UNSET:-2gb}", "2gb"}, {"${EMPTY:-2gb}", "2gb"},
      {"${EMPTY-2gb}", ""},   {"${UNSET-1g}", "1g"}, {"$$SET", "$SET"},        {"plain", "plain"},
      {"${SET:-x}b", "4gbb"}, {"${UNSET}", ""},
  };
  for (const Case& c : cases) {
    Result<std::string> r = Interpolate(c.in, env);
    ASSERT_TRUE(r.ok()) << c.in;
    EXPECT_EQ(*r, c.out) << c.in;
  }
  EXPECT_FALSE(Interpolate("${UNCLOSED", env).ok());
  EXPECT_FALSE(Interpolate("${}", env).ok());
}

TEST(Compose, ComposeSizes) {
  for (const char* ok : {"2gb", "10.24gb", "512m", "1024", "64M", "2G", "100b", "1k"})
    EXPECT_TRUE(IsComposeSize(ok)) << ok;
  for (const char* bad : {"", "lots", "2Gi", "2 g", "-1", "1.g", "g", "2tb", "1e3"})
    EXPECT_FALSE(IsComposeSize(bad)) << bad;
}

TEST(Compose, FixInMemoryIsSurgical) {
  std::string text =
      "# keep me\n"
      "services:\n"
      "  a:   # the trainer\n"
      "    image: pytorch/pytorch\n"
      "\n"
      "  b:\n"
      "    image: nginx\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  EXPECT_EQ(fix->fixed,
            "# keep me\n"
            "services:\n"
            "  a:   # the trainer\n"
            "    shm_size: \"2gb\"\n"
            "    image: pytorch/pytorch\n"
            "\n"
            "  b:\n"
            "    image: nginx\n");
  ASSERT_EQ(fix->changes.size(), 1u);
}

TEST(Compose, FlowStyleServiceIsReportedNotRewritten) {
  Result<ComposeFix> fix = FixComposeText("c.yml", "services:\n  a: {image: pytorch/pytorch}\n", "");
  ASSERT_TRUE(fix.ok());
  EXPECT_EQ(fix->fixed, fix->original);
  ASSERT_EQ(fix->skipped.size(), 1u);
  EXPECT_NE(fix->skipped[0].find("add shm_size by hand"), std::string::npos);
}

TEST(Compose, ErrorsNameFileAndLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"services:\n  a:\n    image: [x\n", "c.yml:"},
      {"services:\n  a:\n    x: 1\n    x: 2\n", "c.yml:4:5: duplicate key 'x'"},
      {"[1, 2]\n", "c.yml:1:1: a compose file must be a mapping"},
      {"services: 3\n", "'services' must be a mapping"},
  };
  for (const Case& c : cases) {
    Result<ComposeFix> fix = FixComposeText("c.yml", c.text, "");
    ASSERT_FALSE(fix.ok()) << c.text;
    EXPECT_NE(fix.status().message().find(c.expect), std::string::npos) << fix.status().message();
  }
}

}  // namespace
}  // namespace shmkeeper
