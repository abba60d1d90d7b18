#include "node/exposition.h"

#include <array>
#include <charconv>
#include <cmath>

namespace shmkeeper {

std::string PromFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::array<char, 64> buf{};
  // Plain notation (the shortest that round-trips) for the magnitudes
  // timestamps, durations and ratios have; exponent notation, also exact,
  // only for the very large or very small.
  double mag = std::fabs(v);
  auto fmt = v == 0 || (mag >= 1e-4 && mag < 1e16) ? std::chars_format::fixed : std::chars_format::general;
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, fmt);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf.data(), end);
}

}  // namespace shmkeeper
