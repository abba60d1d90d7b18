// Numbers in the Prometheus text exposition format.
#pragma once

#include <sstream>
#include <string>

namespace shmkeeper {

// `v` as the exposition format reads a sample value or timestamp: the
// shortest decimal that parses back to exactly `v` (std::to_chars, never
// iostream's 6 significant digits), "NaN", "+Inf" or "-Inf". Values from
// 1e-4 to 1e16 print in plain notation ("1795460123.456789", "1795460000"),
// others in exponent notation ("1e-09").
std::string PromFloat(double v);

// One metric family written to `out`: its name is given once, here, and
// every sample line reuses it ("# HELP", "# TYPE", then `name{labels} value`).
// Labels are passed already rendered (`reason="held"`); values are integers,
// or PromFloat text. Borrows `out` for its life.
class Family {
 public:
  Family(std::ostringstream& out, const char* name, const char* type, const char* help) : out_(out), name_(name) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  template <class V>
  void Add(const V& value) {
    out_ << name_ << " " << value << "\n";
  }
  template <class V>
  void Add(const std::string& labels, const V& value) {
    out_ << name_ << "{" << labels << "} " << value << "\n";
  }

 private:
  std::ostringstream& out_;
  const char* name_;
};

// `key="value"` with the value given as written (callers escape untrusted text).
inline std::string Label(const char* key, const std::string& value) { return std::string(key) + "=\"" + value + "\""; }

}  // namespace shmkeeper
