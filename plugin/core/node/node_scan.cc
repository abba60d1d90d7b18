#include "node/node_scan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "node/node_scan_internal.h"
#include "scan/memcg.h"
#include "scan/shm_dir.h"

namespace shmkeeper {

namespace node_scan_detail {
namespace {

// Whether the pod's /dev/shm is its own tmpfs rather than one it joined
// (docker --ipc=container:, a podman pod member): a tmpfs mount in its spec,
// or a bind of a host tmpfs whose path names one of its containers.
bool OwnsShm(const PodRecord& p) {
  if (p.shm_host_source.empty()) return true;
  return std::any_of(p.containers.begin(), p.containers.end(), [&](const ContainerRecord& c) {
    return !c.id.empty() && p.shm_host_source.find(c.id) != std::string::npos;
  });
}

}  // namespace

std::vector<size_t> OwnersFirst(const std::vector<PodRecord>& pods) {
  std::vector<size_t> order(pods.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return OwnsShm(pods[i]); });
  return order;
}

}  // namespace node_scan_detail

using node_scan_detail::OwnersFirst;
using node_scan_detail::SteadyClock;
using node_scan_detail::TopSegments;

namespace {

NodeFacts::Options FactsOptions(const ScanOptions& o) {
  NodeFacts::Options f;
  f.proc = o.proc;
  f.sys = o.sys;
  f.dev = o.dev;
  f.clock = o.clock;
  return f;
}

// The processes of the pods (access processes and container inits, with
// their start times): a change says a container came, went or was replaced.
NodeFacts::PodProcesses PodProcessesOf(const std::vector<PodRecord>& pods) {
  NodeFacts::PodProcesses out;
  for (const PodRecord& p : pods) {
    out.emplace_back(p.access_pid, p.access_start_ticks);
    for (const ContainerRecord& c : p.containers) out.emplace_back(c.pid, c.start_ticks);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Scanner::Scanner(ScanOptions options) : opts_(std::move(options)), facts_(FactsOptions(opts_)) {}

std::optional<ProcInfo> Scanner::AccessInfo(pid_t pid, uint64_t start_ticks, std::map<pid_t, AccessEntry>* next) {
  if (start_ticks == 0) return ReadProcInfo(pid, opts_.proc);  // no start time to know the process by
  if (auto it = access_.find(pid); it != access_.end() && it->second.start_ticks == start_ticks) {
    next->insert(*it);
    return it->second.info;
  }
  std::optional<ProcInfo> info = ReadProcInfo(pid, opts_.proc);
  if (info) next->insert_or_assign(pid, AccessEntry{start_ticks, *info});
  return info;
}
int64_t Scanner::PodMemcgShmem(const PodRecord& p, bool walk, std::map<pid_t, MemcgEntry>* next) {
  // Every container of the pod: a CRI pod's workload containers have memory
  // cgroups of their own, apart from the pause container's (the access pid).
  std::vector<pid_t> pids = {p.access_pid};
  std::vector<std::pair<pid_t, uint64_t>> members;
  for (const ContainerRecord& c : p.containers) {
    if (c.pid > 0 && c.pid != p.access_pid) pids.push_back(c.pid);
    members.emplace_back(c.pid, c.start_ticks);
  }
  MemcgEntry now{p.access_start_ticks, p.used_bytes, p.sysv_bytes, p.files, p.sysv_segments, scans_, 0, members};
  auto it = memcg_.find(p.access_pid);
  if (!walk && p.access_start_ticks != 0 && it != memcg_.end()) {
    const MemcgEntry& last = it->second;
    if (last.start_ticks == now.start_ticks && last.used_bytes == now.used_bytes && last.files == now.files &&
        last.sysv_bytes == now.sysv_bytes && last.sysv_segments == now.sysv_segments && last.members == now.members &&
        scans_ - last.read_at_scan < kMemcgEvery) {
      next->insert(*it);
      return last.shmem_bytes;
    }
  }
  now.shmem_bytes = MemcgShmemOf(opts_.proc, pids);
  next->insert_or_assign(p.access_pid, now);
  return now.shmem_bytes;
}

void Scanner::Memory::Begin() {
  seen_files.clear();
  seen_sysv.clear();
}

Scanner::History& Scanner::Memory::Meet(const FileKey& key) {
  seen_files.insert(key);
  return files[key];
}

void Scanner::Memory::End() {
  std::erase_if(files, [&](const auto& kv) { return !seen_files.count(kv.first); });
  std::erase_if(lease_refused, [&](const FileKey& k) { return !seen_files.count(k); });
  std::erase_if(sysv_unheld, [&](const auto& kv) { return !seen_sysv.count(kv.first); });
}

// The access process of each pod (a watched host directory lives in the
// agent's own namespaces), and the pods whose IPC namespace the scan lists
// (sysv_of: a pod's index into the listing, SIZE_MAX for none).
void Scanner::ReadAccess(const std::vector<PodRecord>& pods, PodAccess* out) {
  out->infos.assign(pods.size(), std::nullopt);
  out->sysv_of.assign(pods.size(), SIZE_MAX);
  std::map<pid_t, AccessEntry> access_next;
  for (size_t i = 0; i < pods.size(); ++i) {
    const PodRecord& p = pods[i];
    if (p.access_pid > 0) {
      out->infos[i] = AccessInfo(p.access_pid, p.access_start_ticks, &access_next);
    } else if (!p.host_dir.empty()) {
      out->infos[i] = ReadProcInfo(::getpid(), opts_.proc);
    }
    if (!out->infos[i] || !p.host_dir.empty()) continue;
    out->sysv_of[i] = out->sysv_pids.size();
    out->sysv_pids.push_back(p.access_pid);
  }
  access_ = std::move(access_next);
}

// One pod's turn (owners first): its tmpfs usage, its files' verdicts and
// top segments, its SysV segments and memory cgroup.
void Scanner::MeasurePod(size_t i, PodTurn* t) {
  PodRecord& p = t->snap->pods[i];
  const ShmDir& d = (*t->dirs)[i];
  NodeSnapshot* snap = t->snap;
  p.size_bytes = d.size_bytes;
  p.used_bytes = d.used_bytes;
  p.files = static_cast<int32_t>(d.files.size());
  p.unlinked_bytes = p.shares_host_shm ? 0 : std::max<int64_t>(0, d.used_bytes - d.linked_bytes);
  if (p.shm_dev && t->counted.insert(p.shm_dev).second && !p.shares_host_shm) snap->pods_shm_used_bytes += p.used_bytes;
  const ProcInfo* access = t->access.infos[i] ? &*t->access.infos[i] : nullptr;
  size_t first_leak = snap->leaks.size();
  p.shm_counted_elsewhere = p.shm_dev && !t->judged.insert(p.shm_dev).second;
  if (d.over_limit) {  // none of its files is judged: no leaks, no top segments
    KeepOverLimit(&p, d, snap);
  } else {
    if (!p.shm_counted_elsewhere) {
      int fd = (*t->fds)[i].valid() ? (*t->fds)[i].get() : -1;
      FileLeaks(&p, d, fd, t->view, access, t->walk, t->clock, &t->held, snap);
    }
    std::map<FileKey, LeakState> verdicts;
    for (size_t k = first_leak; k < snap->leaks.size(); ++k) verdicts[snap->leaks[k].key] = snap->leaks[k].state;
    p.top_segments = TopSegments(p, d.files, t->view->table, t->view->RefsIfUsed(), opts_.top_segments, verdicts,
                                 t->held.held, t->held.observed_pids, opts_.proc);
  }
  if (!access || !p.host_dir.empty()) return;
  SysvLeaks(&p, t->view, t->sysv[t->access.sysv_of[i]], t->clock, &t->ipc_seen, snap);
  p.memcg_shmem_bytes = PodMemcgShmem(p, t->walk, &t->memcg_next);
}

// The end of a scan: what it read becomes the memory of the next one, and
// everything kept under files, segments and tmpfs it did not meet goes.
void Scanner::EndScan(const NodeSnapshot& snap) {
  facts_.EndScan();  // none needed by this scan: forgotten (the next need reads afresh)
  mem_.End();
  if (opts_.creators) opts_.creators->Retain(mem_.seen_files);
  std::set<dev_t> devs;
  for (const PodRecord& p : snap.pods) {
    if (p.shm_dev) devs.insert(p.shm_dev);
  }
  if (opts_.observer) {
    opts_.observer->Retain(devs, mem_.seen_files);
    std::erase_if(listings_, [&](const auto& kv) { return !devs.count(kv.first); });
  }
  std::erase_if(superblocks_, [&](const auto& kv) { return !devs.count(kv.first); });
}

NodeSnapshot Scanner::Scan(ScanDepth depth, VerdictUse use) {
  auto t0 = SteadyClock::now();
  bool walk = depth == ScanDepth::kWalk || !opts_.observer;
  verdicts_remove_ = use == VerdictUse::kRemove;
  int64_t fact_reads = facts_.reads();
  marked_now_.clear();
  // Every event queued until now is applied before the listing cache and the
  // observer's verdicts are consulted.
  if (opts_.observer && !walk) opts_.observer->Drain();
  NodeSnapshot snap;
  snap.time = opts_.clock->WallNow();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  snap.hostname = host;
  snap.pods = DiscoverPods(walk);
  dev_t host_dev = 0;
  MeasureHost(&snap, &host_dev);
  std::vector<ShmDir> dirs;
  std::vector<UniqueFd> fds;
  ProcView view;
  view.table = MeasurePods(&snap.pods, host_dev, &dirs, &fds, walk);
  snap.restored_from_quarantine = RestoreFromQuarantine(snap.pods, fds, &dirs);
  for (const ShmDir& d : dirs) snap.listed_entries += d.entries;
  std::set<dev_t> devices;
  for (const PodRecord& p : snap.pods) {
    if (p.shm_dev) devices.insert(p.shm_dev);
  }
  facts_.BeginScan(std::move(devices), PodProcessesOf(snap.pods));
  view.facts = &facts_;
  // A table of every process read by this scan (a walk, or one for an
  // unobserved tmpfs) is the facts' own: nothing to read again.
  if (walk || !view.table.procs.empty()) facts_.Adopt(view.table);
  if (walk) (void)view.Refs();  // a walk reads everything (mount holders of held files too)
  Clock clock{opts_.clock->Now(),
              std::chrono::duration_cast<std::chrono::seconds>(snap.time.time_since_epoch()).count()};
  mem_.Begin();
  PodTurn turn;
  turn.snap = &snap;
  turn.dirs = &dirs;
  turn.fds = &fds;
  turn.view = &view;
  turn.clock = clock;
  turn.walk = walk;
  // The SysV segments of the pods' IPC namespaces, all listed by one thread.
  ReadAccess(snap.pods, &turn.access);
  turn.sysv = ListSysvShmEach(turn.access.sysv_pids, opts_.proc);
  for (size_t i : OwnersFirst(snap.pods)) MeasurePod(i, &turn);
  memcg_ = std::move(turn.memcg_next);
  EndScan(snap);
  snap.evidence_walks = facts_.reads() - fact_reads;
  snap.scans = ++scans_;
  if (walk) ++walks_;
  snap.walked = walk;
  snap.walks = walks_;
  snap.duration = std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - t0);
  return snap;
}

const char* PodKindName(PodKind kind) {
  switch (kind) {
    case PodKind::kKubernetes:
      return "kubernetes";
    case PodKind::kCompose:
      return "compose";
    case PodKind::kContainer:
      return "container";
    case PodKind::kHost:
      return "host";
    case PodKind::kPodman:
      return "podman";
  }
  return "?";
}

const char* LeakStateName(LeakState state) {
  switch (state) {
    case LeakState::kHeld:
      return "held";
    case LeakState::kUnheld:
      return "unheld";
    case LeakState::kLeaked:
      return "leaked";
  }
  return "?";
}

}  // namespace shmkeeper
