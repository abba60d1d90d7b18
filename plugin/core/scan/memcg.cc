#include "scan/memcg.h"

#include <cstdlib>
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

}  // namespace

Memcg ReadMemcg(const std::string& proc, const std::string& who) {
  Memcg m;
  Result<std::string> cg = ReadFile(proc + "/" + who + "/cgroup", 1 << 16);
  if (!cg.ok()) return m;
  std::string v1path, v2path;
  std::istringstream in(*cg);
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctrls.find(",memory,") != std::string::npos) v1path = line.substr(b + 1);
    if (line.compare(0, 3, "0::") == 0) v2path = line.substr(b + 1);
  }
  bool v1 = !v1path.empty();
  std::string base = v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
  // Inside a container, its own cgroup is usually mounted at the root; only
  // "self" may fall back there (for another pid it would be the wrong cgroup).
  std::vector<std::string> dirs = {base + (v1 ? v1path : v2path)};
  if (who == "self") dirs.push_back(base);
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

}  // namespace shmkeeper
