#include "scan/memcg.h"

#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

int64_t StatValue(const std::string& text, const std::string& key) {
  std::string t = "\n" + text;
  size_t at = t.find("\n" + key + " ");
  return at == std::string::npos ? 0 : std::atoll(t.c_str() + at + key.size() + 2);
}

struct MemcgPath {
  bool found = false;
  bool v1 = false;
  std::string dir;  // under /sys/fs/cgroup/memory (v1) or /sys/fs/cgroup (v2)
};

// The memory cgroup `who` is in, from `proc`/<who>/cgroup.
MemcgPath MemcgPathOf(const std::string& proc, const std::string& who) {
  MemcgPath out;
  Result<std::string> cg = ReadFile(proc + "/" + who + "/cgroup", 1 << 16);
  if (!cg.ok()) return out;
  std::string v1path, v2path;
  std::istringstream in(*cg);
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctrls.find(",memory,") != std::string::npos) v1path = line.substr(b + 1);
    if (line.compare(0, 3, "0::") == 0) v2path = line.substr(b + 1);
  }
  out.found = true;
  out.v1 = !v1path.empty();
  out.dir = (out.v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup") + (out.v1 ? v1path : v2path);
  return out;
}

}  // namespace

Memcg ReadMemcg(const std::string& proc, const std::string& who) {
  Memcg m;
  MemcgPath path = MemcgPathOf(proc, who);
  if (!path.found) return m;
  bool v1 = path.v1;
  // Inside a container, its own cgroup is usually mounted at the root; only
  // "self" may fall back there (for another pid it would be the wrong cgroup).
  std::vector<std::string> dirs = {path.dir};
  if (who == "self") dirs.push_back(v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup");
  for (const std::string& dir : dirs) {
    Result<std::string> stat = ReadFile(dir + "/memory.stat", 1 << 16);
    if (!stat.ok()) continue;
    m.found = true;
    m.shmem_bytes = StatValue(*stat, "shmem");
    Result<std::string> limit = ReadFile(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"), 256);
    if (limit.ok() && limit->rfind("max", 0) != 0) {
      long long v = std::atoll(limit->c_str());
      if (v > 0 && v < (1LL << 62)) m.limit_bytes = v;  // v1 reports "no limit" as a huge number
    }
    break;
  }
  return m;
}

int64_t MemcgShmemOf(const std::string& proc, const std::vector<pid_t>& pids) {
  std::set<std::string> dirs;
  bool v1 = false;
  for (pid_t pid : pids) {
    MemcgPath path = MemcgPathOf(proc, std::to_string(pid));
    if (!path.found) continue;
    v1 = path.v1;
    dirs.insert(path.dir.ends_with("/") ? path.dir.substr(0, path.dir.size() - 1) : path.dir);
  }
  int64_t sum = 0;
  for (const std::string& dir : dirs) {
    bool below = false;  // v2: counted in an ancestor of the list already
    for (const std::string& other : dirs) below = below || (!v1 && dir.starts_with(other + "/"));
    if (below) continue;
    if (Result<std::string> stat = ReadFile(dir + "/memory.stat", 1 << 16); stat.ok()) {
      sum += StatValue(*stat, "shmem");
    }
  }
  return sum;
}

}  // namespace shmkeeper
