// Held, unheld or leaked: the verdict on each file of a pod's tmpfs
// (FileLeaks) and each SysV segment of its IPC namespace (SysvLeaks), and
// the evidence they read (node_scan.h's LeakState says what each word means).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>

#include "node/node_scan_internal.h"
#include "scan/lease_probe.h"

namespace shmkeeper {
namespace {

using node_scan_detail::DisplayPath;
using node_scan_detail::OpenPodShm;
using node_scan_detail::SteadyClock;

// Adds an unheld segment to its pod and the snapshot, with its verdict:
// leaked needs evidence (a creator source), that creator dead, and
// leaks.grace over since the agent first saw it unheld; else unheld.
// `grace`: none when the file cannot be judged (kept unheld whatever the evidence).
void FinishLeak(LeakRecord l, PodRecord* p, SteadyClock::time_point now, SteadyClock::time_point first_unheld,
                std::optional<std::chrono::seconds> grace, NodeSnapshot* snap) {
  l.pod = p->key;
  l.fsid = p->shm_fsid;
  bool past_grace = grace && now - first_unheld >= std::chrono::duration_cast<SteadyClock::duration>(*grace);
  l.state = !l.creator_source.empty() && l.creator_dead && past_grace ? LeakState::kLeaked : LeakState::kUnheld;
  l.unheld_for_sec = std::chrono::duration<double>(now - first_unheld).count();
  l.reclaimable = l.state == LeakState::kLeaked;
  l.access_pid = p->access_pid;
  l.host_dir = p->host_dir;
  l.shm_host_source = p->shm_host_source;
  l.reclaim_opt_out = p->reclaim_opt_out;
  p->unheld_bytes += l.bytes;
  snap->unheld_bytes += l.bytes;
  if (l.state == LeakState::kLeaked) {
    p->leaked_bytes += l.bytes;
    snap->leaked_bytes += l.bytes;
  }
  snap->leaks.push_back(std::move(l));
}

// The reason a file held by a reference /proc does not show is kept.
const char* RefReason(const FileRef& r) { return r.kind == FileRef::kMount ? "mount" : "loop_device"; }

}  // namespace

NameHint CreatorHintFromName(const std::string& path) {
  std::string name = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  auto pid_at = [&](size_t pos) -> pid_t {
    size_t end = pos;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == pos || end - pos > 9 || (end < name.size() && name[end] != '_')) return 0;
    return static_cast<pid_t>(std::atol(name.c_str() + pos));
  };
  if (name.starts_with("torch_")) return {"torch", pid_at(6)};
  if (name.starts_with("sgl_shm_")) {
    size_t us = name.find('_', 8);
    return {"sgl_shm", us == std::string::npos ? 0 : pid_at(us + 1)};
  }
  if (name.starts_with("psm_")) return {"psm", 0};
  if (name.starts_with("nccl-")) return {"nccl", 0};
  return {"", 0};
}

bool Scanner::NeedsFreshFacts(const PodRecord& p, const LeakRecord& l, SteadyClock::time_point now,
                              SteadyClock::time_point since) const {
  if (!verdicts_remove_ || p.reclaim_opt_out || facts_.ReadThisScan()) return false;
  bool past_grace = now - since >= std::chrono::duration_cast<SteadyClock::duration>(opts_.grace);
  return !l.creator_source.empty() && l.creator_dead && past_grace;
}
namespace {

// The pid namespaces in which a pid in a segment's name may have been taken:
// those of the processes that have the pod's tmpfs at /dev/shm, of the pod's
// containers, and of its access process (a watched host directory: the
// agent's own). Empty when they cannot all be known.
std::set<ino_t> ReachingPidNamespaces(const PodRecord& p, const ProcTable& table, const NodeRefs& refs,
                                      const ProcInfo* access) {
  if (!refs.complete || !access) return {};
  std::set<ino_t> out;
  if (auto it = refs.shm_pid_ns.find(p.shm_dev); it != refs.shm_pid_ns.end()) out = it->second;
  out.insert(access->pid_ns);
  for (const ContainerRecord& c : p.containers) {
    if (const ProcInfo* init = table.Find(c.pid)) out.insert(init->pid_ns);
  }
  out.erase(0);
  return out;
}

}  // namespace

namespace {

// Whether a write lease on the pod's file `rel` (inode `key`) is still
// refused: the one lease probe (scan/lease_probe.h: below the pod's shm root
// without following symlinks, SIGCONT as its break signal, let go at once).
// True on any doubt.
bool LeaseStillRefused(const PodRecord& p, const std::string& rel, const FileKey& key, const std::string& proc) {
  Result<UniqueFd> root = OpenPodShm(p, proc);
  if (!root.ok()) return true;
  Result<ProbeVerdict> v = ProbeLease(root->get(), rel, key);
  return !v.ok() || *v != ProbeVerdict::kUnheld;
}

}  // namespace

void Scanner::SeedHolders(dev_t dev, const ShmDir& d, const ProcTable& table, bool walked) {
  if (walked) {  // the walk found every holder: the observer knows them from now on
    for (const ShmFile& f : d.files) {
      auto held = table.holders.find(f.key);
      if (held == table.holders.end()) continue;
      std::vector<pid_t> pids;
      for (const HolderRef& r : held->second) pids.push_back(r.pid);
      opts_.observer->Seed(f.key, pids);
    }
    return;
  }
  if (!marked_now_.count(dev) || d.files.empty()) return;
  // Marked by this scan, which does not walk (a new pod): files opened before
  // the mark get their holders from one walk for this tmpfs's files.
  std::set<FileKey> keys;
  for (const ShmFile& f : d.files) keys.insert(f.key);
  for (const auto& [key, refs] : ScanHolders(keys, opts_.proc)) {
    std::vector<pid_t> pids;
    for (const HolderRef& r : refs) pids.push_back(r.pid);
    opts_.observer->Seed(key, pids);
  }
}

void Scanner::FileLeaks(PodRecord* p, const ShmDir& d, int dir_fd, ProcView* view, const ProcInfo* access, bool walked,
                        const Clock& clock, HeldFiles* held_files, NodeSnapshot* snap) {
  PodFiles pf{p, dir_fd, view, access, walked, &clock, held_files, snap};
  pf.observer = opts_.observer && dir_fd >= 0 && opts_.observer->Watching(p->shm_dev) ? opts_.observer : nullptr;
  // Observing, but this tmpfs is not marked (yet): a sample of /proc cannot
  // tell use between scans, so its files are kept until a scan marks it.
  pf.unobserved = opts_.observer && dir_fd >= 0 && !pf.observer;
  pf.walked_dev = walked || !pf.observer;
  if (pf.observer) SeedHolders(p->shm_dev, d, view->table, walked);
  for (const ShmFile& f : d.files) JudgeFile(&pf, f);
}

void Scanner::JudgeFile(PodFiles* pf, const ShmFile& f) {
  History& h = mem_.Meet(f.key);
  h.last_seen = pf->clock->now;
  std::optional<Observer::Use> use;
  if (pf->observer) {
    bool walk_held = pf->view->table.holders.count(f.key) > 0;
    use = pf->walked ? pf->observer->Audit(pf->dir_fd, f.path, f.key, walk_held)
                     : pf->observer->Check(pf->dir_fd, f.path, f.key);
    // Removed since the listing (a file created and removed at once, seen
    // in passing): no leak, nothing to read for it (the listing is redone).
    if (use->gone && !walk_held) return;
  }
  if (HeldByProcess(pf, f, &h, use)) return;
  JudgeUnheld(pf, f, &h, use);
}

void Scanner::Keep(PodFiles* pf, const FileKey& key, History* h, const std::string& reason) {
  h->unheld = false;
  pf->held->held.insert(key);
  if (!reason.empty()) pf->snap->kept_by_reason[reason]++;
}

bool Scanner::HeldByProcess(PodFiles* pf, const ShmFile& f, History* h, const std::optional<Observer::Use>& use) {
  auto held = pf->view->table.holders.find(f.key);
  bool walk_held = held != pf->view->table.holders.end();
  if (!walk_held && !(use && use->held)) return false;
  pid_t holder = walk_held ? held->second.front().pid : (!use->pids.empty() ? use->pids.back() : 0);
  if (holder && h->last_holder_pid != holder) {  // read the command only on change
    h->last_holder_pid = holder;
    h->last_holder_command = ProcCommand(h->last_holder_pid, opts_.proc);
  }
  if (use && !pf->walked_dev) pf->held->observed_pids[f.key] = use->pids;
  if (walk_held || use->holders_pending) {
    h->hidden_reason.clear();  // held by what the walk saw, or awaiting the observer's next holder walk
  } else if (use->probed_now) {
    h->hidden_reason = HiddenReason(pf, f, *use);
  }
  Keep(pf, f.key, h, h->hidden_reason);
  return true;
}

// The kernel says held and no walk saw a process: is any process seen using
// it a holder? If not, a reference /proc does not show holds it (decided
// once per probe, not per scan).
std::string Scanner::HiddenReason(PodFiles* pf, const ShmFile& f, const Observer::Use& use) const {
  bool shown =
      std::any_of(use.pids.begin(), use.pids.end(), [&](pid_t pid) { return ProcessHolds(pid, f.key, opts_.proc); });
  if (shown) return "";
  std::vector<FileRef> kernel = pf->view->Refs().Of(f.key, f.path);
  return kernel.empty() ? "lease" : RefReason(kernel.front());
}

bool Scanner::KeptByKernel(PodFiles* pf, const ShmFile& f, History* h, const NodeRefs& refs) {
  if (std::vector<FileRef> kernel = refs.Of(f.key, f.path); !kernel.empty()) {  // a mount, a loop device
    Keep(pf, f.key, h, RefReason(kernel.front()));
    return true;
  }
  if (!mem_.lease_refused.count(f.key)) return false;
  if (LeaseStillRefused(*pf->p, f.path, f.key, opts_.proc)) {
    Keep(pf, f.key, h, "lease");
    return true;
  }
  mem_.lease_refused.erase(f.key);
  return false;
}

void Scanner::JudgeUnheld(PodFiles* pf, const ShmFile& f, History* h, const std::optional<Observer::Use>& use) {
  // Unheld by every process: the references /proc does not show (the node
  // facts: read again when a signal says they changed, node_facts.h).
  NameHint hint = CreatorHintFromName(f.path);
  std::optional<CreatorRecord> rec = opts_.creators ? opts_.creators->Find(f.key, pf->p->shm_fsid) : std::nullopt;
  if (KeptByKernel(pf, f, h, pf->view->Refs())) return;
  const Clock& clock = *pf->clock;
  if (!h->unheld) {
    h->unheld = true;
    h->first_unheld = clock.now;
  }
  // Unheld since the last use the kernel reported (a close between two
  // scans counts), never earlier than the first scan that found it unheld.
  SteadyClock::time_point since = h->first_unheld;
  if (use && use->last_activity && *use->last_activity > since) since = *use->last_activity;
  LeakRecord l;
  l.path = DisplayPath(*pf->p, f.path);
  l.rel = f.path;
  l.bytes = f.bytes;
  l.age_sec = std::max<int64_t>(0, clock.now_sec - f.mtime_sec);
  l.name_pattern = hint.pattern;
  l.creator_pid = hint.pid;
  if (rec) {  // exact: the kernel named the creator when it made the file
    l.creator_pid = rec->ns_pid;
    l.creator_source = "record";
    l.creator_command = rec->command;
    l.creator_dead = !rec->Alive(opts_.proc);
  } else if (hint.pid) {
    NameEvidence(pf, hint, &l);
  }
  l.last_holder_pid = h->last_holder_pid;
  l.last_holder_command = h->last_holder_command;
  l.key = f.key;
  if (!pf->unobserved && NeedsFreshFacts(*pf->p, l, clock.now, since)) {
    // A verdict that would remove the file: on facts read by this scan only.
    facts_.Refresh();
    pf->reaching.reset();
    JudgeUnheld(pf, f, h, use);
    return;
  }
  if (pf->unobserved) pf->snap->kept_by_reason["unobserved"]++;
  FinishLeak(std::move(l), pf->p, clock.now, since, pf->unobserved ? std::nullopt : std::optional(opts_.grace),
             pf->snap);
}

// A name's pid is dead only when it runs in none of the pid namespaces that
// reach the tmpfs.
void Scanner::NameEvidence(PodFiles* pf, const NameHint& hint, LeakRecord* l) {
  l->creator_source = "name:" + hint.pattern;
  if (!pf->reaching) pf->reaching = ReachingPidNamespaces(*pf->p, facts_.Procs(), facts_.Refs(), pf->access);
  const std::set<ino_t>& reaching = *pf->reaching;
  // Alive: watched by the facts, so that its exit reads them again.
  bool alive_here = pf->access && facts_.Alive(pf->access->pid_ns, hint.pid);
  bool alive_elsewhere =
      std::any_of(reaching.begin(), reaching.end(), [&](ino_t ns) { return facts_.Alive(ns, hint.pid); });
  l->creator_dead = !reaching.empty() && !alive_elsewhere;
  if (reaching.empty()) {
    pf->snap->kept_by_reason["pid_namespaces_unknown"]++;
  } else if (alive_elsewhere && !alive_here) {
    pf->snap->kept_by_reason["creator_in_other_pid_ns"]++;
  }
}

void Scanner::SysvLeaks(PodRecord* p, ProcView* view, const SysvListing& sysv, const Clock& clock,
                        std::set<ino_t>* ipc_seen, NodeSnapshot* snap) {
  ino_t ipc_ns = sysv.ipc_ns;
  if (ipc_ns == 0 || sysv.host || !sysv.status.ok()) return;  // the host's IPC namespace is not the pod's
  bool first = ipc_seen->insert(ipc_ns).second;               // pods sharing a namespace report its leaks once
  for (const SysvSegment& s : sysv.segments) {
    p->sysv_bytes += s.bytes;
    p->sysv_segments++;
    if (!first || s.nattch != 0) continue;
    auto key = std::make_pair(ipc_ns, s.shmid);
    mem_.MeetSysv(key);
    auto it = mem_.sysv_unheld.try_emplace(key, clock.now).first;
    // The kernel's own record of use: the last shmat/shmdt (shm_atime,
    // shm_dtime). One newer than the first scan that saw it detached moves
    // "unheld since" forward, so attach/detach between scans is never missed.
    SteadyClock::time_point since = it->second;
    int64_t last_use = std::max(s.atime, s.dtime);
    if (last_use > 0) {
      // Both times are whole seconds (the kernel's are truncated): the use
      // may have been up to a second later than last_use says, so "ago" is
      // the least it can be, never more (a grace never ends early).
      auto ago = std::chrono::seconds(std::max<int64_t>(0, clock.now_sec - last_use - 1));
      SteadyClock::time_point used = clock.now - std::chrono::duration_cast<SteadyClock::duration>(ago);
      if (used > since) since = used;
    }
    LeakRecord l;
    l.sysv_id = s.shmid;
    l.bytes = s.bytes;
    l.age_sec = std::max<int64_t>(0, clock.now_sec - s.ctime);
    l.creator_pid = s.cpid;
    l.creator_source = "sysv:cpid";
    auto creator_dead = [&] {
      const ProcInfo* creator = view->Procs().Find(s.cpid);
      return !creator || view->Procs().IpcNs(creator->pid) != ipc_ns;
    };
    l.creator_dead = creator_dead();
    if (NeedsFreshFacts(*p, l, clock.now, since)) {  // a verdict that would remove it: on facts of this scan
      facts_.Refresh();
      l.creator_dead = creator_dead();
    }
    l.last_holder_pid = s.lpid;
    l.sysv_cpid = s.cpid;
    l.sysv_lpid = s.lpid;
    l.sysv_atime = s.atime;
    l.sysv_dtime = s.dtime;
    FinishLeak(std::move(l), p, clock.now, since, opts_.grace, snap);
  }
}

}  // namespace shmkeeper
