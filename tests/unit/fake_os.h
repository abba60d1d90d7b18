// An Os with scripted facts and faults, for unit tests.
#pragma once

#include <map>
#include <string>

#include "base/os.h"

namespace shmkeeper {

class FakeOs : public Os {
 public:
  int64_t host_memory = int64_t{16} << 30;
  std::map<std::string, FsInfo> fs;          // StatFs results by path
  std::map<std::string, std::string> links;  // RealPath results; default identity
  Status remount_error;
  std::map<std::string, int64_t> remounted;  // path -> size

  Result<FsInfo> StatFs(const std::string& path) override {
    auto it = fs.find(path);
    if (it == fs.end()) return Status::FromErrno(ENOENT, "statfs " + path);
    return it->second;
  }
  Status RemountTmpfs(const std::string& path, int64_t bytes, unsigned long) override {
    if (!remount_error.ok()) return remount_error;
    remounted[path] = bytes;
    return Status::Ok();
  }
  int64_t HostMemoryBytes() override { return host_memory; }
  Result<std::string> RealPath(const std::string& path) override {
    auto it = links.find(path);
    return it == links.end() ? path : it->second;
  }
};

}  // namespace shmkeeper
