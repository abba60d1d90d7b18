#include "node/node_facts.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>

#include "scan/mount_ns.h"

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
  // Asked of the kernel now: a process started since the facts were read
  // (`docker exec` in an existing container makes no signal) is alive.
  std::optional<pid_t> asked = AskAlive(pid_ns, ns_pid);
  if (!asked) {  // cannot ask (Linux < 6.9, no member left): the facts, read by this scan
    if (!refs.Alive(pid_ns, ns_pid)) Refresh();  // once per scan
    if (!refs_->Alive(pid_ns, ns_pid)) return false;
    asked = procs_->HostPid(pid_ns, ns_pid);
  }
  if (*asked <= 0) return false;
  alive_.insert({*asked, ProcInfo{*asked, pid_ns, ns_pid, 0}});  // rule 4: its exit reads them again
  return true;
}

std::optional<pid_t> NodeFacts::AskAlive(ino_t pid_ns, pid_t ns_pid) const {
  for (const ProcInfo& p : procs_->procs) {
    if (p.pid_ns != pid_ns) continue;
    std::string path = opts_.proc + "/" + std::to_string(p.pid) + "/ns/pid";
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    // Still a member (its pid not another process's by now).
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_ino != pid_ns) continue;
    Result<pid_t> tgid = TgidFromPidNamespace(fd.get(), ns_pid);
    if (!tgid.ok()) return std::nullopt;
    return *tgid;
  }
  return std::nullopt;
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
  if (std::string why = Stale(); !why.empty()) {
    Read(why);
  } else if (std::string made = NamespaceMade(); !made.empty()) {
    Read(made);
  } else if (UpdateNamespaces()) {
    Compose();
  }
}

std::string NodeFacts::Stale() const {
  if (!procs_ || !refs_) return "never";
  if (invalid_) return "invalidated";
  if (scan_devices_ != devices_) return "devices";
  if (scan_pods_ != pods_) return "pods";
  if (unwatched_) return "unwatched";
  if (opts_.clock->Now() - read_at_ >= opts_.max_age) return "age";
  if (CreatorExited()) return "creator_exited";
  return "";
}

bool NodeFacts::CreatorExited() const {
  return std::any_of(alive_.begin(), alive_.end(), [&](const auto& kv) {
    std::optional<ProcInfo> now = ReadProcInfo(kv.first, opts_.proc);
    return !now || now->pid_ns != kv.second.pid_ns || now->ns_pid != kv.second.ns_pid;
  });
}

std::string NodeFacts::NamespaceMade() {
  if (!known_ns_) return "namespaces_unknown";
  Result<std::vector<uint64_t>> now = MountNamespaces();
  if (!now.ok()) return "namespaces_unknown";
  // Ids are unique but not ordered by creation: a new one is any id not
  // known, wherever it sorts.
  if (!std::includes(known_ns_->begin(), known_ns_->end(), now->begin(), now->end())) return "namespace_made";
  *known_ns_ = std::move(*now);  // some may have gone: compared with what is left next time
  return "";
}

Result<std::vector<uint64_t>> NodeFacts::MountNamespaces() const {
  if (opts_.mount_namespaces) return opts_.mount_namespaces();
  UniqueFd self(::open((opts_.proc + "/self/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  if (!self.valid()) return Status::FromErrno(errno, "open /proc/self/ns/mnt");
  return MountNamespaceIds(self.get());
}

namespace {

bool InNamespace(pid_t pid, ino_t ns, const std::string& proc) {
  struct stat st;
  return ::stat((proc + "/" + std::to_string(pid) + "/ns/mnt").c_str(), &st) == 0 && st.st_ino == ns;
}

}  // namespace

bool NodeFacts::Rewatch(ino_t ns, Space* space) const {
  // Members that left go (their pids may be another namespace's by now).
  while (!space->members.empty()) {
    pid_t pid = space->members.front();
    UniqueFd fd(::open((opts_.proc + "/" + std::to_string(pid) + "/mountinfo").c_str(), O_RDONLY | O_CLOEXEC));
    // Opened through a process that was still in that namespace (not one
    // that exited and whose pid was taken meanwhile).
    if (fd.valid() && InNamespace(pid, ns, opts_.proc)) {
      space->watched = pid;
      space->fd = std::move(fd);
      struct pollfd p = {space->fd.get(), POLLPRI, 0};
      (void)::poll(&p, 1, 0);  // drain: the read that follows sees what came before
      return true;
    }
    space->members.erase(space->members.begin());
    space->pid_ns.erase(space->pid_ns.begin());
  }
  space->fd.reset();
  return false;
}

void NodeFacts::ReadSpace(Space* space) {
  space->refs = NodeRefs{};
  ReadNamespaceRefs(space->members, space->pid_ns, devices_, opts_.proc, &space->refs);
}

// One poll(2) over every watch: POLLPRI (with POLLERR) on a mountinfo whose
// namespace's mount table changed since the last poll. Then a stat per
// namespace: its watched member still in it.
bool NodeFacts::UpdateNamespaces() {
  std::vector<struct pollfd> fds;
  fds.reserve(spaces_.size());
  for (const auto& [ns, sp] : spaces_) fds.push_back({sp.fd.get(), POLLPRI, 0});
  if (!fds.empty() && ::poll(fds.data(), fds.size(), 0) < 0) {
    for (struct pollfd& p : fds) p.revents = POLLPRI;  // cannot tell: all changed
  }
  bool changed = false;
  size_t i = 0;
  for (auto it = spaces_.begin(); it != spaces_.end(); ++i) {
    bool left = !InNamespace(it->second.watched, it->first, opts_.proc);
    if (left && !Rewatch(it->first, &it->second)) {  // nobody left in it: closed now, pins nothing
      it = spaces_.erase(it);
      changed = true;
      continue;
    }
    if (left || (fds[i].revents & POLLPRI)) {
      ReadSpace(&it->second);
      ++namespace_reads_;
      changed = true;
    }
    ++it;
  }
  return changed;
}

void NodeFacts::Read(const std::string& reason) {
  if (reason == "walk") {
    known_ns_.reset();  // the walk was made before the namespaces were asked: read again next time
  } else {
    // Asked before the pass: a namespace made during it is not among them.
    Result<std::vector<uint64_t>> ids = MountNamespaces();
    known_ns_ = ids.ok() ? std::optional<std::vector<uint64_t>>(std::move(*ids)) : std::nullopt;
    ProcTable procs = ScanProcesses({}, opts_.proc);  // processes and namespaces only: no fds, no maps
    procs_ = std::move(procs);
    ++reads_;
  }
  devices_ = scan_devices_;
  pods_ = scan_pods_;
  alive_.clear();
  invalid_ = false;
  base_ = NodeRefs{};
  std::map<ino_t, Space> next;  // procs are sorted by pid: each namespace's lowest member first
  for (const ProcInfo& p : procs_->procs) {
    base_.live.insert({p.pid_ns, p.ns_pid});
    if (p.mnt_ns == 0) {  // no mount namespace read: exiting (reaches nothing), or unreadable
      struct stat st;
      if (::stat((opts_.proc + "/" + std::to_string(p.pid) + "/ns/mnt").c_str(), &st) == 0) base_.complete = false;
      continue;
    }
    Space& sp = next[p.mnt_ns];
    sp.members.push_back(p.pid);
    sp.pid_ns.push_back(p.pid_ns);
  }
  unwatched_ = next.size() > kMaxWatches;
  size_t watched = 0;
  for (auto& [ns, sp] : next) {
    auto old = spaces_.find(ns);
    if (old != spaces_.end() && !sp.members.empty() && old->second.watched == sp.members.front()) {
      sp.watched = old->second.watched;  // the same watch
      sp.fd = std::move(old->second.fd);
      struct pollfd p = {sp.fd.get(), POLLPRI, 0};
      (void)::poll(&p, 1, 0);  // drain: read below
    } else if (watched >= kMaxWatches || !Rewatch(ns, &sp)) {
      unwatched_ = true;  // read, but not watched: not reused
    }
    ++watched;
    if (!devices_.empty()) ReadSpace(&sp);
  }
  spaces_ = std::move(next);  // the other watches are closed here
  Compose();
  read_at_ = opts_.clock->Now();
  read_this_scan_ = checked_this_scan_ = true;
  last_reason_ = reason;
}

void NodeFacts::Compose() {
  NodeRefs r = base_;
  for (const auto& [ns, sp] : spaces_) {
    r.complete = r.complete && sp.refs.complete;
    for (const auto& [dev, roots] : sp.refs.mounts) {
      for (const auto& [root, refs] : roots) {
        std::vector<FileRef>& to = r.mounts[dev][root];
        to.insert(to.end(), refs.begin(), refs.end());
      }
    }
    for (const auto& [dev, pid_ns] : sp.refs.shm_pid_ns) r.shm_pid_ns[dev].insert(pid_ns.begin(), pid_ns.end());
  }
  refs_ = std::move(r);
  loops_this_scan_ = false;  // read by Refs()
}

void NodeFacts::Forget() {
  procs_.reset();
  known_ns_.reset();
  refs_.reset();
  spaces_.clear();
  alive_.clear();
  devices_.clear();
  pods_.clear();
  unwatched_ = false;
}

}  // namespace shmkeeper
