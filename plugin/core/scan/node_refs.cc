#include "scan/node_refs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

// Undoes mountinfo's octal escapes (\040 space, \011 tab, \012 newline, \134 backslash).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

constexpr std::string_view kDeleted = "//deleted";

// Whether `pid` still has a mount namespace (a zombie or an exiting process
// has none any more, and reaches no file).
bool HasMountNs(pid_t pid, const std::string& proc) {
  struct stat st;
  return ::stat((proc + "/" + std::to_string(pid) + "/ns/mnt").c_str(), &st) == 0;
}

}  // namespace

void ReadNamespaceRefs(const std::vector<pid_t>& members, const std::vector<ino_t>& pid_ns_of_members,
                       const std::set<dev_t>& devices, const std::string& proc, NodeRefs* out) {
  Result<std::string> text = Status::NotFound("no member");
  pid_t pid = 0;
  for (pid_t m : members) {
    text = ReadFile(proc + "/" + std::to_string(m) + "/mountinfo", 64 << 20);
    if (text.ok() && !text->empty()) {
      pid = m;
      break;
    }
  }
  if (!pid) {
    // Unreadable while a member still has the namespace: its mounts are unknown.
    if (std::any_of(members.begin(), members.end(), [&](pid_t m) { return HasMountNs(m, proc); })) {
      out->complete = false;
    }
    return;
  }
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    MountLine m;
    if (!ParseMountInfoLine(line, &m) || !devices.count(m.dev)) continue;
    if (m.mount_point == "/dev/shm") {
      for (ino_t ns : pid_ns_of_members) out->shm_pid_ns[m.dev].insert(ns);
    }
    if (m.root == "/" || std::string_view(m.root).ends_with(kDeleted)) continue;
    out->mounts[m.dev][m.root].push_back(
        {FileRef::kMount, "mount " + m.mount_point + " (mount namespace of pid " + std::to_string(pid) + ")", pid});
  }
}

void ReadLoopRefs(const std::set<dev_t>& devices, const std::string& sys, const std::string& dev, NodeRefs* out) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir((sys + "/block").c_str()), ::closedir);
  if (!dir) return;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string name = e->d_name;
    if (!name.starts_with("loop")) continue;
    Result<std::string> backing = ReadFile(sys + "/block/" + name + "/loop/backing_file", 8192);
    if (!backing.ok()) continue;  // not attached
    FileKey key;
    UniqueFd fd(::open((dev + "/" + name).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    struct loop_info64 info {};
    if (fd.valid() && ::ioctl(fd.get(), LOOP_GET_STATUS64, &info) == 0) {
      key = {static_cast<dev_t>(info.lo_device), static_cast<ino_t>(info.lo_inode)};
    } else {  // no device node here: the path the kernel shows, as the agent sees it
      std::string path = *backing;
      while (!path.empty() && path.back() == '\n') path.pop_back();
      if (path.ends_with(" (deleted)")) continue;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;
      key = {st.st_dev, st.st_ino};
    }
    if (devices.count(key.dev)) out->loops[key].push_back({FileRef::kLoop, "loop device " + dev + "/" + name, 0});
  }
}

bool ParseMountInfoLine(const std::string& line, MountLine* out) {
  std::istringstream in(line);
  std::string id, parent, majmin, root, mount_point;
  if (!(in >> id >> parent >> majmin >> root >> mount_point)) return false;
  size_t colon = majmin.find(':');
  if (colon == std::string::npos) return false;
  char* end = nullptr;
  unsigned long maj = std::strtoul(majmin.c_str(), &end, 10);
  if (end != majmin.c_str() + colon) return false;
  unsigned long min = std::strtoul(majmin.c_str() + colon + 1, &end, 10);
  if (*end != '\0') return false;
  out->dev = makedev(maj, min);
  out->root = Unescape(root);
  out->mount_point = Unescape(mount_point);
  return true;
}

std::vector<FileRef> NodeRefs::Of(const FileKey& key, const std::string& rel) const {
  std::vector<FileRef> out;
  if (auto it = loops.find(key); it != loops.end()) out = it->second;
  auto dev = mounts.find(key.dev);
  if (dev == mounts.end()) return out;
  std::string tail = "/" + rel;
  for (const auto& [root, refs] : dev->second) {
    if (root == tail || std::string_view(root).ends_with(tail)) out.insert(out.end(), refs.begin(), refs.end());
  }
  return out;
}

NodeRefs ReadNodeRefs(const ProcTable& table, const std::set<dev_t>& devices, const std::string& proc,
                      const std::string& sys, const std::string& dev) {
  NodeRefs out;
  // The members of each mount namespace and their pid namespaces (procs are
  // sorted by pid: the lowest first).
  std::map<ino_t, std::pair<std::vector<pid_t>, std::vector<ino_t>>> namespaces;
  for (const ProcInfo& p : table.procs) {
    out.live.insert({p.pid_ns, p.ns_pid});
    if (p.mnt_ns == 0) {  // no mount namespace read: exiting (reaches nothing), or unreadable
      if (HasMountNs(p.pid, proc)) out.complete = false;
      continue;
    }
    auto& members = namespaces[p.mnt_ns];
    members.first.push_back(p.pid);
    members.second.push_back(p.pid_ns);
  }
  if (!devices.empty()) {
    for (const auto& [ns, members] : namespaces) {
      ReadNamespaceRefs(members.first, members.second, devices, proc, &out);
    }
    ReadLoopRefs(devices, sys, dev, &out);
  }
  return out;
}

}  // namespace shmkeeper
