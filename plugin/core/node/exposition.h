// Numbers in the Prometheus text exposition format.
#pragma once

#include <string>

namespace shmkeeper {

// `v` as the exposition format reads a sample value or timestamp: the
// shortest decimal that parses back to exactly `v` (std::to_chars, never
// iostream's 6 significant digits), "NaN", "+Inf" or "-Inf". Values from
// 1e-4 to 1e16 print in plain notation ("1795460123.456789", "1795460000"),
// others in exponent notation ("1e-09").
std::string PromFloat(double v);

}  // namespace shmkeeper
