#include "node/node_facts.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>

namespace shmkeeper {

void NodeFacts::BeginScan(std::set<dev_t> devices, PodProcesses pods) {
  scan_devices_ = std::move(devices);
  scan_pods_ = std::move(pods);
  checked_this_scan_ = read_this_scan_ = used_this_scan_ = loops_this_scan_ = false;
}

void NodeFacts::Adopt(const ProcTable& walked) {
  ProcTable t;
  t.procs = walked.procs;
  t.proc = walked.proc;
  t.self_pid_ns = walked.self_pid_ns;
  procs_ = std::move(t);
  Read("walk");
}

const ProcTable& NodeFacts::Procs() {
  Use();
  return *procs_;
}

const NodeRefs& NodeFacts::Refs() {
  Use();
  if (!loops_this_scan_) {  // no signal says a loop device was attached: read at each scan that asks
    refs_->loops.clear();
    ReadLoopRefs(devices_, opts_.sys, opts_.dev, &*refs_);
    loops_this_scan_ = true;
  }
  return *refs_;
}

bool NodeFacts::Alive(ino_t pid_ns, pid_t ns_pid) {
  const NodeRefs& refs = Refs();
  if (!refs.Alive(pid_ns, ns_pid)) return false;
  if (pid_t host = procs_->HostPid(pid_ns, ns_pid); host > 0) alive_.insert({host, ProcInfo{host, pid_ns, ns_pid, 0}});
  return true;
}

void NodeFacts::Refresh() {
  used_this_scan_ = true;
  checked_this_scan_ = true;
  if (!read_this_scan_) Read("refresh");
}

void NodeFacts::EndScan() {
  if (!used_this_scan_) Forget();
}

void NodeFacts::Use() {
  used_this_scan_ = true;
  if (checked_this_scan_) return;
  checked_this_scan_ = true;
  if (std::string why = Stale(); !why.empty()) Read(why);
}

std::string NodeFacts::Stale() {
  if (!procs_ || !refs_) return "never";
  if (invalid_) return "invalidated";
  if (scan_devices_ != devices_) return "devices";
  if (scan_pods_ != pods_) return "pods";
  if (unwatched_) return "unwatched";
  if (opts_.clock->Now() - read_at_ >= opts_.max_age) return "age";
  if (MountsChanged()) return "mounts";
  if (NamespaceLeft()) return "namespace_left";
  if (CreatorExited()) return "creator_exited";
  return "";
}

// One poll(2) over every watch: POLLPRI (with POLLERR) on a mountinfo whose
// namespace's mount table changed since the last poll.
bool NodeFacts::MountsChanged() {
  std::vector<struct pollfd> fds;
  fds.reserve(watches_.size());
  for (const auto& [ns, w] : watches_) fds.push_back({w.fd.get(), POLLPRI, 0});
  if (fds.empty()) return false;
  int n = ::poll(fds.data(), fds.size(), 0);
  if (n < 0) return true;  // cannot tell
  return std::any_of(fds.begin(), fds.end(), [](const struct pollfd& p) { return (p.revents & POLLPRI) != 0; });
}

// Whether a watch's process left its namespace; such watches are closed now,
// so that a dead pod's namespace is not kept alive by the agent.
bool NodeFacts::NamespaceLeft() {
  bool left = false;
  for (auto it = watches_.begin(); it != watches_.end();) {
    struct stat st;
    std::string path = opts_.proc + "/" + std::to_string(it->second.pid) + "/ns/mnt";
    if (::stat(path.c_str(), &st) == 0 && st.st_ino == it->first) {
      ++it;
      continue;
    }
    it = watches_.erase(it);
    left = true;
  }
  return left;
}

bool NodeFacts::CreatorExited() const {
  return std::any_of(alive_.begin(), alive_.end(), [&](const auto& kv) {
    std::optional<ProcInfo> now = ReadProcInfo(kv.first, opts_.proc);
    return !now || now->pid_ns != kv.second.pid_ns || now->ns_pid != kv.second.ns_pid;
  });
}

void NodeFacts::Read(const std::string& reason) {
  if (reason != "walk") {
    ProcTable procs = ScanProcesses({}, opts_.proc);  // processes and namespaces only: no fds, no maps
    procs_ = std::move(procs);
    ++reads_;
  }
  devices_ = scan_devices_;
  pods_ = scan_pods_;
  alive_.clear();
  invalid_ = false;
  WatchNamespaces();
  refs_ = ReadNodeRefs(*procs_, devices_, opts_.proc, opts_.sys, opts_.dev);
  read_at_ = opts_.clock->Now();
  read_this_scan_ = checked_this_scan_ = loops_this_scan_ = true;
  last_reason_ = reason;
}

void NodeFacts::WatchNamespaces() {
  std::map<ino_t, pid_t> members;  // each namespace's lowest pid (procs are sorted by pid)
  for (const ProcInfo& p : procs_->procs) {
    if (p.mnt_ns != 0) members.try_emplace(p.mnt_ns, p.pid);
  }
  std::map<ino_t, Watch> next;
  unwatched_ = members.size() > kMaxWatches;
  for (const auto& [ns, pid] : members) {
    if (next.size() == kMaxWatches) break;
    if (auto it = watches_.find(ns); it != watches_.end() && it->second.pid == pid) {
      next.emplace(ns, std::move(it->second));
      continue;
    }
    std::string path = opts_.proc + "/" + std::to_string(pid) + "/mountinfo";
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    // Opened through a process that was still in that namespace (not one
    // that exited and whose pid was taken meanwhile).
    std::string ns_path = opts_.proc + "/" + std::to_string(pid) + "/ns/mnt";
    if (!fd.valid() || ::stat(ns_path.c_str(), &st) != 0 || st.st_ino != ns) {
      unwatched_ = true;  // it left meanwhile; others may still be in the namespace: read again next time
      continue;
    }
    next.emplace(ns, Watch{pid, std::move(fd)});
  }
  watches_ = std::move(next);  // the others are closed here
  (void)MountsChanged();       // drain: the read that follows sees those changes
}

void NodeFacts::Forget() {
  procs_.reset();
  refs_.reset();
  watches_.clear();
  alive_.clear();
  devices_.clear();
  pods_.clear();
  unwatched_ = false;
}

}  // namespace shmkeeper
