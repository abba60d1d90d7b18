#include "base/bytes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <limits>

namespace shmkeeper {
namespace {

struct Good {
  const char* text;
  int64_t bytes;
};

void PrintTo(const Good& g, std::ostream* os) { *os << '"' << g.text << '"'; }

class ParseSizeGood : public ::testing::TestWithParam<Good> {};

TEST_P(ParseSizeGood, Parses) {
  Result<int64_t> r = ParseSize(GetParam().text);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, GetParam().bytes);
}

INSTANTIATE_TEST_SUITE_P(Forms, ParseSizeGood,
                         ::testing::Values(
                             // Kubernetes quantities.
                             Good{"2Gi", 2 * kGiB}, Good{"512Mi", 512 * kMiB}, Good{"1Ki", 1024},
                             Good{"1Ti", 1024 * kGiB}, Good{"1.5G", 1500000000}, Good{"500M", 500000000},
                             Good{"1.5Gi", 3 * kGiB / 2}, Good{"1E", 1000000000000000000},
                             Good{"7Ei", 7 * (int64_t{1} << 60)},
                             // Docker / compose.
                             Good{"2g", 2 * kGiB}, Good{"10.24gb", 10995116277}, Good{"64m", 64 * kMiB},
                             Good{"67108864", 67108864}, Good{"1024k", kMiB}, Good{"2GB", 2 * kGiB},
                             Good{"512MiB", 512 * kMiB}, Good{"100b", 100}, Good{"2K", 2048}, Good{"1t", 1024 * kGiB},
                             Good{"007", 7}, Good{"9223372036854775807", INT64_MAX}));

class ParseSizeBad : public ::testing::TestWithParam<const char*> {};

TEST_P(ParseSizeBad, RejectedWithQuotedInput) {
  std::string text = GetParam();
  Result<int64_t> r = ParseSize(text);
  ASSERT_FALSE(r.ok()) << text << " parsed as " << *r;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"" + text + "\""), std::string::npos) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(Inputs, ParseSizeBad,
                         ::testing::Values("", "-1", "-2Gi", "0", "0Gi", "0.0", "0.0000001", "NaN", "nan", "inf",
                                           "Infinity", "9223372036854775808", "8Ei", "9999999999999999999999",
                                           "10000000000G", "2Gix", "2Gi ", " 2Gi", "2 Gi", "2\tGi", "2\nGi", "2X",
                                           "2Zi", "1.2.3", "1.", ".5Gi", "+2Gi", "0x10", "1e3", "2gbb", "2bi", "2bb",
                                           "2iB", "Gi", "1.0000000000000000001", "٣"));

TEST(FormatSize, Iec) {
  EXPECT_EQ(FormatSize(64 * kMiB), "64MiB");
  EXPECT_EQ(FormatSize(3 * kGiB / 2), "1.5GiB");
  EXPECT_EQ(FormatSize(512), "512B");
  EXPECT_EQ(FormatSize(2 * kGiB), "2GiB");
  EXPECT_EQ(FormatSize(1000), "1000B");
  EXPECT_EQ(FormatSize(1500), "1.46KiB");
}

// What a tmpfs reports for size=N: whole pages (the kernel's DIV_ROUND_UP).
struct Rounding {
  const char* name;
  int64_t bytes, page, expect;
};

class RoundUpToPageTest : public ::testing::TestWithParam<Rounding> {};

TEST_P(RoundUpToPageTest, WholePages) {
  const Rounding& r = GetParam();
  EXPECT_EQ(RoundUpToPage(r.bytes, r.page), r.expect);
  EXPECT_EQ(RoundUpToPage(r.expect, r.page), r.expect);  // a rounded size is a fixed point
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

INSTANTIATE_TEST_SUITE_P(
    Sizes, RoundUpToPageTest,
    ::testing::Values(Rounding{"zero", 0, 4096, 0}, Rounding{"one_byte", 1, 4096, 4096},
                      Rounding{"page_minus_one", 4095, 4096, 4096}, Rounding{"page", 4096, 4096, 4096},
                      Rounding{"page_plus_one", 4097, 4096, 8192},
                      // Kubernetes decimal quantities: 1G = 10^9 = 244140.625 pages.
                      Rounding{"k8s_1G", 1000000000, 4096, 1000001536},
                      Rounding{"k8s_500M", 500000000, 4096, 500002816},
                      Rounding{"issue_100000001", 100000001, 4096, 100003840},
                      Rounding{"k8s_1G_64k_pages", 1000000000, 65536, 1000013824},
                      Rounding{"binary_unchanged", 2 * kGiB, 4096, 2 * kGiB},
                      Rounding{"near_int64_max", kMax - 10, 4096, kMax / 4096 * 4096},
                      Rounding{"int64_max", kMax, 4096, kMax / 4096 * 4096},
                      Rounding{"last_page_that_fits", kMax / 4096 * 4096 - 1, 4096, kMax / 4096 * 4096}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RoundUpToPage, DefaultsToThisMachinesPage) {
  EXPECT_EQ(RoundUpToPage(1), SystemPageSize());
  EXPECT_EQ(SystemPageSize(), ::sysconf(_SC_PAGESIZE));
}

}  // namespace
}  // namespace shmkeeper
