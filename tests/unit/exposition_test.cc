#include "node/exposition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace shmkeeper {
namespace {

TEST(PromFloat, TimestampsKeepEveryDigit) {
  EXPECT_EQ(PromFloat(1795460123.456789), "1795460123.456789");
  EXPECT_EQ(PromFloat(1795460123.0), "1795460123");
  EXPECT_EQ(std::stod(PromFloat(1795460123.456789)), 1795460123.456789);
}

TEST(PromFloat, ShortestRoundTrip) {
  for (double v : {0.0, 0.1, 0.001234, 1e-9, 12345.678, 1e300, -2.5, 4503599627370497.0}) {
    EXPECT_EQ(std::stod(PromFloat(v)), v) << PromFloat(v);
  }
  EXPECT_EQ(PromFloat(0.1), "0.1");
  EXPECT_EQ(PromFloat(0), "0");
}

TEST(PromFloat, SpecialValuesAsTheFormatSpellsThem) {
  EXPECT_EQ(PromFloat(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(PromFloat(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PromFloat(-std::numeric_limits<double>::infinity()), "-Inf");
}

}  // namespace
}  // namespace shmkeeper
