// JSON helpers shared by every component. JSON is never hand-rolled.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace shmkeeper {

// Order-preserving JSON: edited documents keep their key order.
using Json = nlohmann::ordered_json;

// The first key of every `-o json` document the CLIs print (status, pods,
// leaks, reclaim, watch, doctor, compose check): raised when a key is renamed
// or removed, never when one is added. Keys are camelCase in every verb.
inline constexpr const char* kJsonSchemaVersion = "shmkeeper.io/v1";

// Serializes without throwing: strings that are not valid UTF-8 (paths and
// values from untrusted input can be anything) get U+FFFD replacements.
template <typename J>
std::string DumpJson(const J& j, int indent = -1) {
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

// The string at `obj[key]`, or `fallback` when `obj` is not an object or the
// member is missing or not a string. Never throws: unlike Json::value, a
// member of the wrong type (untrusted input) is not an exception.
template <typename J>
std::string StringField(const J& obj, const char* key, std::string fallback = "") {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return fallback;
  return it->template get<std::string>();
}

// The integer at `obj[key]`, or `fallback` (same contract as StringField).
template <typename T, typename J>
T IntegerField(const J& obj, const char* key, T fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return fallback;
  return it->template get<T>();
}

}  // namespace shmkeeper
