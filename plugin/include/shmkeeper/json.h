// JSON helpers shared by every component. JSON is never hand-rolled.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace shmkeeper {

// Order-preserving JSON: edited documents keep their key order.
using Json = nlohmann::ordered_json;

// Serializes without throwing: strings that are not valid UTF-8 (paths and
// values from untrusted input can be anything) get U+FFFD replacements.
template <typename J>
std::string DumpJson(const J& j, int indent = -1) {
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

}  // namespace shmkeeper
