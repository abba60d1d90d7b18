// An OCI runtime spec (a bundle's config.json) edited as generic JSON, so
// unknown and future fields survive; key order is preserved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/json.h"
#include "base/status.h"

namespace shmkeeper {

class Spec {
 public:
  // Specs beyond these are not read (real ones are a few KiB, ~6 levels deep).
  static constexpr size_t kMaxSpecBytes = 16 << 20;
  static constexpr int kMaxSpecDepth = 512;

  // Reads <bundle>/config.json. Every failure (missing, unreadable, over
  // kMaxSpecBytes, not parseable) is kFailedPrecondition: the spec is the
  // real runtime's to judge, so callers pass it through untouched.
  static Result<Spec> Load(const std::string& bundle);
  // Parses spec text; `path` is where Save() writes and what errors name.
  // Nesting deeper than kMaxSpecDepth is refused before parsing.
  static Result<Spec> Parse(std::string_view text, std::string path);

  // Writes the spec back atomically (temp file, fsync, rename in the bundle).
  Status Save() const;
  std::string Dump() const { return DumpJson(doc_); }
  const std::string& path() const { return path_; }

  // annotations[key], when present and a string.
  std::optional<std::string> Annotation(std::string_view key) const;
  // The value of NAME=value in process.env (last one wins, as in execve).
  std::optional<std::string> Env(std::string_view name) const;
  // linux.resources.memory.limit when positive.
  std::optional<int64_t> MemoryLimit() const;
  // Whether linux.namespaces has an entry of `type` ("ipc", "pid", ...), and
  // its path ("" when the runtime creates a new namespace).
  std::optional<std::string> Namespace(std::string_view type) const;
  // Index into mounts of the last mount at `destination` (the one in effect).
  std::optional<size_t> FindMount(std::string_view destination) const;

  // REQUIRES: index < number of mounts.
  const Json& Mount(size_t index) const { return doc_["mounts"][index]; }
  // The size= option of mounts[index], in bytes, when present and valid.
  std::optional<int64_t> MountSizeOption(size_t index) const;
  // Replaces (or appends) the size= option of mounts[index].
  void SetMountSizeOption(size_t index, int64_t bytes);

  Json& doc() { return doc_; }
  const Json& doc() const { return doc_; }

 private:
  Spec(Json doc, std::string path) : doc_(std::move(doc)), path_(std::move(path)) {}
  Json doc_;
  std::string path_;
};

}  // namespace shmkeeper
