// The pods of a scan and their tmpfs: containers grouped into pods, Docker's
// names, each tmpfs opened, marked and listed (the listing cache), files a
// reclaim left in quarantine renamed back (node_scan_internal.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <thread>

#include "base/fileutil.h"
#include "base/safe_path.h"
#include "node/node_scan_internal.h"
#include "node/quarantine.h"
#include "scan/fs_identity.h"
#include "scan/shm_dir.h"

namespace shmkeeper {

namespace node_scan_detail {

Result<UniqueFd> OpenPodShm(const PodRecord& p, const std::string& proc) {
  if (!p.host_dir.empty()) {
    UniqueFd fd(::open(p.host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "open " + p.host_dir);
    return fd;
  }
  return OpenProcessDir(p.access_pid, "/dev/shm", proc);
}

}  // namespace node_scan_detail

namespace {

using node_scan_detail::OpenPodShm;

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
    std::set<std::string> listed;
    Status enriched = EnrichFromDocker(opts_.docker_socket, containers, &listed);
    if (!enriched.ok()) {
      if (opts_.reporter) {
        opts_.reporter->Report(kDockerEnrichmentErrors,
                               "container names and labels from Docker unavailable: " + enriched.message());
      }
      return;  // asked again next scan
    }
    RememberDockerNames(*containers, listed);
    return;
  }
  for (ContainerRecord& c : *containers) {
    const DockerNames& d = docker_names_.at(c.id);
    if (!d.name.empty()) c.name = d.name;
    for (const auto& [k, v] : d.labels) c.labels[k] = v;
  }
}

void Scanner::RememberDockerNames(const std::vector<ContainerRecord>& containers, const std::set<std::string>& listed) {
  std::map<std::string, DockerNames> names;
  std::map<std::string, int> misses;
  for (const ContainerRecord& c : containers) {
    if (listed.count(c.id)) {
      names[c.id] = {c.name, c.labels};
      continue;
    }
    int missed = docker_misses_.count(c.id) ? docker_misses_.at(c.id) + 1 : 1;
    misses[c.id] = missed;
    if (missed >= kDockerAsks) names[c.id] = {};  // not Docker's: not asked about again until a walk
  }
  docker_names_ = std::move(names);
  docker_misses_ = std::move(misses);
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
  facts_.Invalidate();  // mounts and pid namespaces found for the old one
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
    int n = RestoreQuarantined(fds[i].get(), hidden, opts_.agent_id, opts_.clock);
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

}  // namespace shmkeeper
