// The C++ tests' one temporary directory (the Python tests' are pytest's
// tmp_path and tmp_path_factory): made with mkdtemp(3), mode 0700,
// removed with everything below it when the object goes (std::filesystem
// removes symlinks, never what they point to). Not thread-safe: one per test
// or fixture.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace shmkeeper::test {

class TempDir {
 public:
  // `prefix` is a path prefix: "/tmp/shmk-agent-" gives /tmp/shmk-agent-XXXXXX.
  explicit TempDir(const std::string& prefix = "/tmp/shmk-test-") {
    std::string tmpl = prefix + "XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;  // a test that failed half-way may leave anything: remove what can be
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // False when mkdtemp failed: ASSERT_TRUE(dir.ok()) before use.
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace shmkeeper::test
