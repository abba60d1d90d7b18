#include "base/proc_args.h"

#include <dirent.h>

#include <cstdlib>
#include <memory>

#include "base/fileutil.h"

namespace shmkeeper {

Result<std::vector<std::string>> ProcCmdline(pid_t pid, const std::string& proc_root) {
  SHMK_ASSIGN_OR_RETURN(std::string raw, ReadFile(proc_root + "/" + std::to_string(pid) + "/cmdline"));
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    argv.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

std::vector<pid_t> FindProcessesByComm(const std::string& comm, const std::string& proc_root) {
  std::vector<pid_t> pids;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(proc_root.c_str()), ::closedir);
  if (!dir) return pids;
  while (struct dirent* e = ::readdir(dir.get())) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    Result<std::string> c = ReadFile(proc_root + "/" + e->d_name + "/comm", 4096);
    if (!c.ok()) continue;
    std::string name = *c;
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (name == comm) pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i < argv.size(); ++i) {
    for (const std::string& form : {"--" + flag, "-" + flag}) {
      if (argv[i] == form && i + 1 < argv.size()) return argv[i + 1];
      if (argv[i].starts_with(form + "=")) return argv[i].substr(form.size() + 1);
    }
  }
  return "";
}

}  // namespace shmkeeper
