#include "node/node_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "base/fileutil.h"
#include "base/safe_path.h"
#include "node/quarantine.h"
#include "scan/fs_identity.h"
#include "scan/lease_probe.h"
#include "scan/memcg.h"
#include "scan/shm_dir.h"

namespace shmkeeper {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Get(const std::map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? "" : it->second;
}

// The pod a container belongs to, and its identity.
std::string PodIdOf(const ContainerRecord& c, PodRecord* p) {
  std::string sandbox = Get(c.annotations, "io.kubernetes.cri.sandbox-id");
  if (!sandbox.empty()) {
    p->key = {PodKind::kKubernetes, Get(c.annotations, "io.kubernetes.cri.sandbox-namespace"),
              Get(c.annotations, "io.kubernetes.cri.sandbox-name"),
              Get(c.annotations, "io.kubernetes.cri.sandbox-uid")};
    return "cri:" + sandbox;
  }
  if (!c.pod_id.empty()) {  // a podman pod: named by its infra container (GroupPods)
    p->key = {PodKind::kPodman, "", c.pod_id.substr(0, 12), c.pod_id};
    return "podman:" + c.pod_id;
  }
  std::string project = Get(c.labels, "com.docker.compose.project");
  std::string name = c.name.empty() ? c.id.substr(0, 12) : c.name;
  if (!project.empty()) {
    p->key = {PodKind::kCompose, project, name, c.id};
    p->compose_project = project;
    p->compose_service = Get(c.labels, "com.docker.compose.service");
  } else {
    p->key = {PodKind::kContainer, "", name, c.id};
  }
  return "ctr:" + c.id;
}

std::vector<PodRecord> GroupPods(const std::vector<ContainerRecord>& containers) {
  std::map<std::string, PodRecord> pods;
  for (const ContainerRecord& c : containers) {
    PodRecord fresh;
    std::string id = PodIdOf(c, &fresh);
    auto [it, inserted] = pods.try_emplace(id, std::move(fresh));
    PodRecord& p = it->second;
    // The container whose tmpfs the pod shares decides what the pod's row shows.
    bool sandbox = Get(c.annotations, "io.kubernetes.cri.container-type") == "sandbox" ||
                   (!c.pod_id.empty() && c.owns_shm && !c.shm_bind_source.empty());
    if (!c.pod_name.empty()) p.key.name = c.pod_name;
    if (inserted || sandbox) {
      p.access_pid = c.pid;
      p.access_start_ticks = c.start_ticks;
      p.annotations = c.annotations;
      p.requested_bytes = c.requested_bytes;
      p.requested_source = c.requested_source;
      p.memory_limit_bytes = c.memory_limit_bytes;
      p.memory_limit_source = c.memory_limit_source;
      p.sized_by = c.sized_by;
      p.shm_host_source = c.shm_bind_source;
    }
    for (const auto& [k, v] : c.labels) p.labels[k] = v;
    p.started_sec = p.started_sec ? std::min(p.started_sec, c.created_sec) : c.created_sec;
    const std::string want = Get(c.annotations, "shmkeeper.io/reclaim");
    p.reclaim_opt_out = p.reclaim_opt_out || want == "report" || want == "off";
    p.containers.push_back(c);
  }
  std::vector<PodRecord> out;
  for (auto& [_, p] : pods) out.push_back(std::move(p));
  return out;
}

Result<UniqueFd> OpenPodShm(const PodRecord& p, const std::string& proc) {
  if (!p.host_dir.empty()) {
    UniqueFd fd(::open(p.host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "open " + p.host_dir);
    return fd;
  }
  return OpenProcessDir(p.access_pid, "/dev/shm", proc);
}

std::string DisplayPath(const PodRecord& p, const std::string& rel) {
  return (p.host_dir.empty() ? std::string("/dev/shm") : p.host_dir) + "/" + rel;
}

// The `n` largest files, with their holders and the holders' commands.
// `held`: the files judged held (by the walk or the observer); `observed`:
// pids the observer saw using them, confirmed one by one when the scan did
// not walk.
LeakState SegmentState(const std::map<FileKey, LeakState>& verdicts, const FileKey& key, bool held);

std::vector<SegmentRecord> TopSegments(const PodRecord& p, const std::vector<ShmFile>& files, const ProcTable& table,
                                       const NodeRefs* refs, size_t n, const std::map<FileKey, LeakState>& verdicts,
                                       const std::set<FileKey>& held_keys,
                                       const std::map<FileKey, std::vector<pid_t>>& observed, const std::string& proc) {
  std::vector<size_t> idx(files.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(n), idx.end(),
                    [&](size_t a, size_t b) { return files[a].bytes > files[b].bytes; });
  std::vector<SegmentRecord> out;
  for (size_t k = 0; k < n; ++k) {
    const ShmFile& f = files[idx[k]];
    SegmentRecord seg{DisplayPath(p, f.path), f.bytes, false, LeakState::kHeld, {}};
    auto held = table.holders.find(f.key);
    if (held != table.holders.end()) {
      for (const HolderRef& r : held->second) seg.holders.push_back({r.pid, ProcCommand(r.pid, proc), r.mapped, ""});
    } else if (auto seen = observed.find(f.key); seen != observed.end()) {
      for (pid_t pid : seen->second) {
        if (ProcessHolds(pid, f.key, proc)) seg.holders.push_back({pid, ProcCommand(pid, proc), false, ""});
      }
    }
    if (refs) {  // read by this scan (always when some file was unheld)
      for (const FileRef& r : refs->Of(f.key, f.path)) seg.holders.push_back({r.pid, "", false, r.what});
    }
    seg.state = SegmentState(verdicts, f.key, !seg.holders.empty() || held_keys.count(f.key) > 0);
    out.push_back(std::move(seg));
  }
  return out;
}

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

namespace {

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

// Whether the pod's /dev/shm is its own tmpfs rather than one it joined
// (docker --ipc=container:, a podman pod member): a tmpfs mount in its spec,
// or a bind of a host tmpfs whose path names one of its containers.
bool OwnsShm(const PodRecord& p) {
  if (p.shm_host_source.empty()) return true;
  return std::any_of(p.containers.begin(), p.containers.end(), [&](const ContainerRecord& c) {
    return !c.id.empty() && p.shm_host_source.find(c.id) != std::string::npos;
  });
}

// The order in which pods' segments are judged: on a tmpfs several pods
// share, the owner's turn comes first and the others' segments are not
// counted again.
std::vector<size_t> OwnersFirst(const std::vector<PodRecord>& pods) {
  std::vector<size_t> order(pods.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return OwnsShm(pods[i]); });
  return order;
}

// The verdict of each file of a pod for its top segments.
LeakState SegmentState(const std::map<FileKey, LeakState>& verdicts, const FileKey& key, bool held) {
  if (held) return LeakState::kHeld;
  auto it = verdicts.find(key);
  return it == verdicts.end() ? LeakState::kUnheld : it->second;
}

}  // namespace

// Names and labels from the Docker API. No socket file means no Docker on
// this node (nothing to report); a socket that fails is an enrichment error.
// Docker is asked only when a container it was not asked about appears, or
// on `refresh`; otherwise the names and labels it gave last time are used.
void Scanner::EnrichOrReport(std::vector<ContainerRecord>* containers, bool refresh) {
  if (opts_.docker_socket.empty()) return;
  bool ask = refresh || std::any_of(containers->begin(), containers->end(),
                                    [&](const ContainerRecord& c) { return !docker_names_.count(c.id); });
  if (ask) {
    struct stat st;
    if (::stat(opts_.docker_socket.c_str(), &st) != 0 && errno == ENOENT) return;
    Status enriched = EnrichFromDocker(opts_.docker_socket, containers);
    if (!enriched.ok()) {
      if (opts_.reporter) {
        opts_.reporter->Report(kDockerEnrichmentErrors,
                               "container names and labels from Docker unavailable: " + enriched.message());
      }
      return;  // asked again next scan
    }
    docker_names_.clear();
    for (const ContainerRecord& c : *containers) docker_names_[c.id] = {c.name, c.labels};
    return;
  }
  for (ContainerRecord& c : *containers) {
    const DockerNames& d = docker_names_.at(c.id);
    if (!d.name.empty()) c.name = d.name;
    for (const auto& [k, v] : d.labels) c.labels[k] = v;
  }
}

std::vector<PodRecord> Scanner::DiscoverPods(bool refresh) {
  std::vector<ContainerRecord> containers = discovery_.Discover(opts_.runtime_roots, opts_.proc);
  EnrichOrReport(&containers, refresh);
  std::vector<PodRecord> pods = GroupPods(containers);
  for (const std::string& dir : opts_.host_shm_dirs) {
    PodRecord p;
    p.key = {PodKind::kHost, "", dir, "host:" + dir};
    p.host_dir = dir;
    pods.push_back(std::move(p));
  }
  return pods;
}

void Scanner::MeasureHost(NodeSnapshot* snap, dev_t* host_dev) const {
  struct stat st;
  *host_dev = ::stat("/dev/shm", &st) == 0 ? st.st_dev : 0;
  UniqueFd fd(::open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return;
  if (Result<ShmDir> d = MeasureShmFs(fd.get()); d.ok()) {
    snap->host_shm_size_bytes = d->size_bytes;
    snap->host_shm_used_bytes = d->used_bytes;
  }
}

namespace {

// The files of a listing that a reclaim left in quarantine (an agent killed
// mid-reclaim), relative to the listed directory.
std::vector<std::string> QuarantinedFiles(const ShmDir& d) {
  std::vector<std::string> hidden;
  for (const ShmFile& f : d.files) {
    size_t slash = f.path.rfind('/');
    if (IsQuarantineName(slash == std::string::npos ? f.path : f.path.substr(slash + 1))) hidden.push_back(f.path);
  }
  return hidden;
}

}  // namespace

const NodeRefs& Scanner::ProcView::Refs() {
  if (!refs) refs = ReadNodeRefs(Procs(), devices, proc, sys, dev);
  return *refs;
}

const ProcTable& Scanner::ProcView::Procs() {
  if (!loaded) {
    ProcTable procs = ScanProcesses({}, table.proc);  // processes and namespaces only: no fds, no maps
    table.procs = std::move(procs.procs);
    table.self_pid_ns = procs.self_pid_ns;
    loaded = true;
  }
  return table;
}

void Scanner::NoteSuperblock(dev_t dev, uint64_t fsid) {
  auto [it, fresh] = superblocks_.try_emplace(dev, fsid);
  if (fresh || it->second == fsid) return;
  it->second = fsid;
  ForgetFilesystem(dev);
}

void Scanner::ForgetFilesystem(dev_t dev) {
  std::erase_if(mem_.files, [dev](const auto& kv) { return kv.first.dev == dev; });
  std::erase_if(mem_.lease_refused, [dev](const FileKey& k) { return k.dev == dev; });
  listings_.erase(dev);
  recent_refs_.reset();  // mounts and pid namespaces found for the old one
}

Result<ShmDir> Scanner::ListPodShm(int fd, dev_t dev, bool walk) {
  if (!walk) {
    if (std::optional<ShmDir> over = OverLimitListing(fd, dev)) return std::move(*over);
  }
  std::optional<uint64_t> watched = opts_.observer ? opts_.observer->Layout(dev) : std::nullopt;
  struct statfs sf;
  bool cacheable = watched.has_value() && ::fstatfs(fd, &sf) == 0;
  Listing now;
  if (cacheable) now = {*watched, FsUse{sf.f_blocks, sf.f_bfree, sf.f_files, sf.f_ffree}, {}};
  auto it = listings_.find(dev);
  if (!walk && cacheable && it != listings_.end() && !it->second.dir.over_limit && it->second.layout == now.layout &&
      it->second.fs == now.fs) {
    ShmDir reused = it->second.dir;
    reused.entries = 0;
    return reused;
  }
  // Layout and statfs are read before the listing: a change while listing
  // shows as a difference next time.
  Result<ShmDir> d = MeasureShmDir(fd, 8, opts_.max_files_per_pod);
  if (d.ok() && (cacheable || d->over_limit)) {
    now.dir = *d;
    listings_[dev] = std::move(now);
  } else {
    listings_.erase(dev);
  }
  return d;
}

int64_t Scanner::RestoreFromQuarantine(const std::vector<PodRecord>& pods, const std::vector<UniqueFd>& fds,
                                       std::vector<ShmDir>* dirs) {
  if (opts_.read_only) return 0;
  int64_t restored = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!fds[i].valid() || pods[i].shares_host_shm) continue;
    std::vector<std::string> hidden = QuarantinedFiles((*dirs)[i]);
    if (hidden.empty()) continue;
    int n = RestoreQuarantined(fds[i].get(), hidden, opts_.agent_id);
    if (n == 0) continue;
    restored += n;
    // The renames changed the listing: list again (and the cache forgets it).
    listings_.erase(pods[i].shm_dev);
    if (Result<ShmDir> d = MeasureShmDir(fds[i].get(), 8, opts_.max_files_per_pod); d.ok()) (*dirs)[i] = std::move(*d);
  }
  return restored;
}

ProcTable Scanner::MeasurePods(std::vector<PodRecord>* pods, dev_t host_dev, std::vector<ShmDir>* dirs,
                               std::vector<UniqueFd>* fds, bool walk) {
  // Open every pod's tmpfs: its device is what holders are looked for on.
  fds->clear();
  fds->resize(pods->size());
  std::set<dev_t> devices;
  for (size_t i = 0; i < pods->size(); ++i) {
    PodRecord& p = (*pods)[i];
    Result<UniqueFd> fd = OpenPodShm(p, opts_.proc);
    struct stat st;
    if (!fd.ok() || ::fstat(fd->get(), &st) != 0) continue;
    Result<uint64_t> fsid = FilesystemId(fd->get());
    (*fds)[i] = std::move(*fd);
    p.shm_dev = st.st_dev;
    p.shm_fsid = fsid.ok() ? *fsid : 0;
    NoteSuperblock(p.shm_dev, p.shm_fsid);
    p.shares_host_shm = p.host_dir.empty() && p.shm_dev == host_dev;
    // Marked before its files are read: no use after this point is missed.
    bool marked_now = false;
    // Watch re-arms a disarmed tmpfs's creates before the listing below; the
    // observer reopens the directory to disarm them at the next create.
    PodRecord way_in;
    way_in.access_pid = p.access_pid;
    way_in.host_dir = p.host_dir;
    Observer::Reopen reopen = [pod = std::move(way_in), proc = opts_.proc] { return OpenPodShm(pod, proc); };
    bool observed = opts_.observer && !p.shares_host_shm &&
                    opts_.observer->Watch((*fds)[i].get(), p.shm_dev, &marked_now, std::move(reopen));
    if (marked_now) marked_now_.insert(p.shm_dev);
    if (walk || !observed) devices.insert(p.shm_dev);
  }
  // Walk the tmpfs directories while /proc is scanned: independent work.
  dirs->assign(pods->size(), ShmDir());
  auto measure = [&] {
    for (size_t i = 0; i < pods->size(); ++i) {
      if (!(*fds)[i].valid()) continue;
      bool host = (*pods)[i].shares_host_shm;
      // Host IPC: the host's files are not the pod's (statfs only).
      Result<ShmDir> d = host ? MeasureShmFs((*fds)[i].get()) : ListPodShm((*fds)[i].get(), (*pods)[i].shm_dev, walk);
      if (!d.ok()) continue;
      (*dirs)[i] = std::move(*d);
    }
  };
  if (devices.empty()) {  // nothing to walk /proc for
    measure();
    ProcTable none;
    none.proc = opts_.proc;
    return none;
  }
  std::thread walker(measure);
  ProcTable table = ScanProcesses(devices, opts_.proc);
  walker.join();
  return table;
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
  const ProcTable& table = view->table;
  Observer* observer = opts_.observer && dir_fd >= 0 && opts_.observer->Watching(p->shm_dev) ? opts_.observer : nullptr;
  // Observing, but this tmpfs is not marked (yet): a sample of /proc cannot
  // tell use between scans, so its files are kept until a scan marks it.
  bool unobserved = opts_.observer && dir_fd >= 0 && !observer;
  bool walked_dev = walked || !observer;  // the walk covered this filesystem
  if (observer) SeedHolders(p->shm_dev, d, table, walked);
  std::set<ino_t> reaching;
  bool reaching_read = false;
  for (const ShmFile& f : d.files) {
    History& h = mem_.Meet(f.key);
    h.last_seen = clock.now;
    auto held = table.holders.find(f.key);
    bool walk_held = held != table.holders.end();
    std::optional<Observer::Use> use;
    if (observer) {
      use = walked ? observer->Audit(dir_fd, f.path, f.key, walk_held) : observer->Check(dir_fd, f.path, f.key);
      // Removed since the listing (a file created and removed at once, seen
      // in passing): no leak, nothing to read for it (the listing is redone).
      if (use->gone && !walk_held) continue;
    }
    if (walk_held || (use && use->held)) {
      pid_t holder = walk_held ? held->second.front().pid : (use && !use->pids.empty() ? use->pids.back() : 0);
      if (holder && h.last_holder_pid != holder) {  // read the command only on change
        h.last_holder_pid = holder;
        h.last_holder_command = ProcCommand(h.last_holder_pid, opts_.proc);
      }
      h.unheld = false;
      held_files->held.insert(f.key);
      if (use && !walked_dev) held_files->observed_pids[f.key] = use->pids;
      if (walk_held) {
        h.hidden_reason.clear();
      } else if (use && use->holders_pending) {
        h.hidden_reason.clear();  // its holders await the observer's next walk
      } else if (use && use->probed_now) {
        // The kernel says held and no walk saw a process: is any process
        // seen using it a holder? If not, a reference /proc does not show
        // holds it (decided once per probe, not per scan).
        bool shown = std::any_of(use->pids.begin(), use->pids.end(),
                                 [&](pid_t pid) { return ProcessHolds(pid, f.key, opts_.proc); });
        h.hidden_reason.clear();
        if (!shown) {
          std::vector<FileRef> kernel = view->Refs().Of(f.key, f.path);
          h.hidden_reason = kernel.empty() ? "lease" : kernel.front().kind == FileRef::kMount ? "mount" : "loop_device";
        }
      }
      if (!h.hidden_reason.empty()) snap->kept_by_reason[h.hidden_reason]++;
      continue;
    }
    // Unheld by every process: the references /proc does not show (read
    // once per scan, on the first such file that creator evidence could
    // make leaked; recent ones for a file that can only be unheld).
    NameHint hint = CreatorHintFromName(f.path);
    std::optional<CreatorRecord> rec = opts_.creators ? opts_.creators->Find(f.key, p->shm_fsid) : std::nullopt;
    const NodeRefs& refs = rec || hint.pid ? view->Refs() : RecentRefs(view);
    if (std::vector<FileRef> kernel = refs.Of(f.key, f.path); !kernel.empty()) {  // a mount, a loop device
      snap->kept_by_reason[kernel.front().kind == FileRef::kMount ? "mount" : "loop_device"]++;
      h.unheld = false;
      held_files->held.insert(f.key);
      continue;
    }
    if (mem_.lease_refused.count(f.key)) {
      if (LeaseStillRefused(*p, f.path, f.key, opts_.proc)) {
        snap->kept_by_reason["lease"]++;
        h.unheld = false;
        held_files->held.insert(f.key);
        continue;
      }
      mem_.lease_refused.erase(f.key);
    }
    if (!h.unheld) {
      h.unheld = true;
      h.first_unheld = clock.now;
    }
    // Unheld since the last use the kernel reported (a close between two
    // scans counts), never earlier than the first scan that found it unheld.
    SteadyClock::time_point since = h.first_unheld;
    if (use && use->last_activity && *use->last_activity > since) since = *use->last_activity;
    LeakRecord l;
    l.path = DisplayPath(*p, f.path);
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
      // Dead only when that pid runs in none of the pid namespaces that reach the tmpfs.
      l.creator_source = "name:" + hint.pattern;
      const NodeRefs& refs = view->Refs();
      if (!reaching_read) reaching = ReachingPidNamespaces(*p, view->Procs(), refs, access);
      reaching_read = true;
      bool alive_here = access && refs.Alive(access->pid_ns, hint.pid);
      bool alive_elsewhere =
          std::any_of(reaching.begin(), reaching.end(), [&](ino_t ns) { return refs.Alive(ns, hint.pid); });
      l.creator_dead = !reaching.empty() && !alive_elsewhere;
      if (reaching.empty()) {
        snap->kept_by_reason["pid_namespaces_unknown"]++;
      } else if (alive_elsewhere && !alive_here) {
        snap->kept_by_reason["creator_in_other_pid_ns"]++;
      }
    }
    l.last_holder_pid = h.last_holder_pid;
    l.last_holder_command = h.last_holder_command;
    l.key = f.key;
    if (unobserved) snap->kept_by_reason["unobserved"]++;
    FinishLeak(std::move(l), p, clock.now, since, unobserved ? std::nullopt : std::optional(opts_.grace), snap);
  }
}

void Scanner::SysvLeaks(PodRecord* p, ProcView* view, const SysvListing& sysv, const Clock& clock,
                        std::set<ino_t>* ipc_seen, NodeSnapshot* snap) {
  const ProcTable& table = view->table;
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
      auto ago = std::chrono::seconds(std::max<int64_t>(0, clock.now_sec - last_use));
      SteadyClock::time_point used = clock.now - std::chrono::duration_cast<SteadyClock::duration>(ago);
      if (used > since) since = used;
    }
    const ProcInfo* creator = view->Procs().Find(s.cpid);
    LeakRecord l;
    l.sysv_id = s.shmid;
    l.bytes = s.bytes;
    l.age_sec = std::max<int64_t>(0, clock.now_sec - s.ctime);
    l.creator_pid = s.cpid;
    l.creator_source = "sysv:cpid";
    l.creator_dead = !creator || table.IpcNs(creator->pid) != ipc_ns;
    l.last_holder_pid = s.lpid;
    l.sysv_cpid = s.cpid;
    l.sysv_lpid = s.lpid;
    l.sysv_atime = s.atime;
    l.sysv_dtime = s.dtime;
    FinishLeak(std::move(l), p, clock.now, since, opts_.grace, snap);
  }
}

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

const NodeRefs& Scanner::RecentRefs(ProcView* view) {
  if (view->refs) return *view->refs;  // read by this scan already
  if (recent_refs_ && recent_refs_devices_ == view->devices && scans_ - recent_refs_scan_ < kRefsEvery) {
    view->recent = &*recent_refs_;
    return *recent_refs_;
  }
  return view->Refs();  // kept as the recent ones at the end of the scan
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

NodeSnapshot Scanner::Scan(ScanDepth depth) {
  auto t0 = SteadyClock::now();
  bool walk = depth == ScanDepth::kWalk || !opts_.observer;
  marked_now_.clear();
  // Every event queued until now is applied before the listing cache and the
  // observer's verdicts are consulted.
  if (opts_.observer && !walk) opts_.observer->Drain();
  NodeSnapshot snap;
  snap.time = std::chrono::system_clock::now();
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
  view.loaded = walk || !view.table.procs.empty();
  for (const PodRecord& p : snap.pods) {
    if (p.shm_dev) view.devices.insert(p.shm_dev);
  }
  view.proc = opts_.proc;
  view.sys = opts_.sys;
  view.dev = opts_.dev;
  if (walk) (void)view.Refs();  // a walk reads everything (mount holders of held files too)
  Clock clock{SteadyClock::now(),
              std::chrono::duration_cast<std::chrono::seconds>(snap.time.time_since_epoch()).count()};
  mem_.Begin();
  std::set<dev_t> counted, judged;
  std::set<ino_t> ipc_seen;
  HeldFiles held;  // node-wide: a pod that shares another's tmpfs shows the owner's verdicts
  // Each pod's access process (a watched host directory lives in the agent's
  // own namespaces), and the SysV segments of the pods' IPC namespaces, all
  // listed by one thread.
  std::vector<std::optional<ProcInfo>> access_infos(snap.pods.size());
  std::vector<pid_t> sysv_pids;
  std::vector<size_t> sysv_of(snap.pods.size(), SIZE_MAX);
  std::map<pid_t, AccessEntry> access_next;
  for (size_t i = 0; i < snap.pods.size(); ++i) {
    const PodRecord& p = snap.pods[i];
    if (p.access_pid > 0) {
      access_infos[i] = AccessInfo(p.access_pid, p.access_start_ticks, &access_next);
    } else if (!p.host_dir.empty()) {
      access_infos[i] = ReadProcInfo(::getpid(), opts_.proc);
    }
    if (!access_infos[i] || !p.host_dir.empty()) continue;
    sysv_of[i] = sysv_pids.size();
    sysv_pids.push_back(p.access_pid);
  }
  access_ = std::move(access_next);
  std::vector<SysvListing> sysv = ListSysvShmEach(sysv_pids, opts_.proc);
  std::map<pid_t, MemcgEntry> memcg_next;
  for (size_t i : OwnersFirst(snap.pods)) {
    PodRecord& p = snap.pods[i];
    const ShmDir& d = dirs[i];
    p.size_bytes = d.size_bytes;
    p.used_bytes = d.used_bytes;
    p.files = static_cast<int32_t>(d.files.size());
    p.unlinked_bytes = p.shares_host_shm ? 0 : std::max<int64_t>(0, d.used_bytes - d.linked_bytes);
    if (p.shm_dev && counted.insert(p.shm_dev).second && !p.shares_host_shm) snap.pods_shm_used_bytes += p.used_bytes;
    const ProcInfo* access = access_infos[i] ? &*access_infos[i] : nullptr;
    size_t first_leak = snap.leaks.size();
    p.shm_counted_elsewhere = p.shm_dev && !judged.insert(p.shm_dev).second;
    if (d.over_limit) {  // none of its files is judged: no leaks, no top segments
      KeepOverLimit(&p, d, &snap);
    } else {
      if (!p.shm_counted_elsewhere) {
        FileLeaks(&p, d, fds[i].valid() ? fds[i].get() : -1, &view, access, walk, clock, &held, &snap);
      }
      std::map<FileKey, LeakState> verdicts;
      for (size_t k = first_leak; k < snap.leaks.size(); ++k) verdicts[snap.leaks[k].key] = snap.leaks[k].state;
      p.top_segments = TopSegments(p, d.files, view.table, view.RefsIfRead(), opts_.top_segments, verdicts, held.held,
                                   held.observed_pids, opts_.proc);
    }
    if (!access || !p.host_dir.empty()) continue;
    SysvLeaks(&p, &view, sysv[sysv_of[i]], clock, &ipc_seen, &snap);
    p.memcg_shmem_bytes = PodMemcgShmem(p, walk, &memcg_next);
  }
  memcg_ = std::move(memcg_next);
  if (view.refs) {  // read afresh by this scan: the recent ones from now on
    recent_refs_ = std::move(view.refs);
    recent_refs_devices_ = view.devices;
    recent_refs_scan_ = scans_;
  } else if (!view.recent) {  // none needed: forget them (the next need reads afresh)
    recent_refs_.reset();
  }
  mem_.End();
  if (opts_.creators) opts_.creators->Retain(mem_.seen_files);
  if (opts_.observer) {
    std::set<dev_t> devs;
    for (const PodRecord& p : snap.pods) {
      if (p.shm_dev) devs.insert(p.shm_dev);
    }
    opts_.observer->Retain(devs, mem_.seen_files);
    std::erase_if(listings_, [&](const auto& kv) { return !devs.count(kv.first); });
  }
  std::erase_if(superblocks_, [&](const auto& kv) {
    return std::none_of(snap.pods.begin(), snap.pods.end(), [&](const PodRecord& p) { return p.shm_dev == kv.first; });
  });
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
