#include "doctor/doctor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "base/proc_args.h"
#include "base/term_escape.h"
#include "decide/workloads.h"
#include "doctor/internal.h"
#include "scan/memcg.h"
#include "scan/proc_table.h"
#include "scan/shm_dir.h"

namespace shmkeeper {
namespace {

constexpr ino_t kInitIpcNs = 0xEFFFFFFFU;  // PROC_IPC_INIT_INO

// Source, type and options of the mount at `path` from mountinfo.
void ReadMount(const std::string& proc, const std::string& path, DoctorReport* r) {
  Result<std::string> info = ReadFile(proc + "/self/mountinfo", 4 << 20);
  if (!info.ok()) return;
  std::istringstream in(*info);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, devno, root, mnt, opts;
    f >> id >> parent >> devno >> root >> mnt >> opts;
    if (mnt != path) continue;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super;
    tail >> fstype >> source >> super;
    r->fstype = fstype;
    r->mount_source = source;
    // Mount options, then the superblock's, each once.
    std::string merged;
    std::set<std::string> seen;
    std::istringstream all(opts + "," + super);
    for (std::string o; std::getline(all, o, ',');) {
      if (!o.empty() && seen.insert(o).second) merged += (merged.empty() ? "" : ",") + o;
    }
    r->mount_options = merged;
  }
}

// Every process in view with its command line.
std::vector<std::pair<pid_t, std::string>> Commands(const std::string& proc) {
  std::vector<std::pair<pid_t, std::string>> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(proc.c_str()), ::closedir);
  while (dir) {
    struct dirent* e = ::readdir(dir.get());
    if (!e) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t pid = std::atoi(e->d_name);
    out.emplace_back(pid, ProcCommand(pid, proc));
  }
  return out;
}

// The workloads of the table (workloads.h) the processes in view show, each
// once, with the size it wants and the error it gives at 64 MiB.
void Workloads(const std::vector<std::pair<pid_t, std::string>>& commands, DoctorReport* r) {
  std::set<std::string> seen;
  for (const auto& [pid, cmd] : commands) {
    if (cmd.empty()) continue;
    WorkloadSignals sig;
    AddCommandWords(cmd, true, &sig);
    for (char c : cmd) sig.text += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const ShmWorkload* w : MatchShmWorkloads(sig)) {
      if (seen.insert(w->name).second) r->workloads.push_back({w->name, pid, w->bytes, w->symptom, w->source});
    }
  }
  // PyTorch, Ray and NCCL have notes of their own below.
  for (const DoctorWorkload& w : r->workloads) {
    if (w.name == "PyTorch" || w.name == "Ray" || w.name == "NCCL") continue;
    r->warnings.push_back(w.name + " (pid " + std::to_string(w.pid) + ") wants a " + FormatSize(w.bytes) +
                          " /dev/shm; with less: " + w.symptom + " (" + w.source + ")");
  }
}

void Frameworks(const std::vector<std::pair<pid_t, std::string>>& commands, const DoctorReport& r,
                std::vector<std::string>* w) {
  bool torch = false, ray = false;
  for (const auto& [pid, cmd] : commands) {
    torch |= cmd.find("torch") != std::string::npos || cmd.find("num_workers") != std::string::npos;
    ray |= cmd.find("raylet") != std::string::npos || cmd.find("ray::") != std::string::npos;
  }
  bool nccl = false, torch_files = false;
  for (const DoctorFile& f : r.largest) {
    std::string name = f.path.substr(f.path.rfind('/') + 1);
    nccl |= name.starts_with("nccl-");
    torch_files |= name.starts_with("torch_");
  }
  if (torch || torch_files) {
    w->push_back(
        "PyTorch: DataLoader workers pass batches through /dev/shm; it needs about num_workers x "
        "prefetch_factor (2) x batch bytes, or workers die with \"Bus error\"");
  }
  if (ray) w->push_back("Ray: the object store wants /dev/shm of at least 30% of RAM; smaller, it falls back to /tmp");
  if (nccl) w->push_back("NCCL: /dev/shm/nccl-* files are per communicator; leaked ones stay until removed");
}

// What is wrong, most important first; r->size_problem when a finding is one
// that another size changes (leaked files alone are not: reclaim frees them).
void Findings(const std::string& shm_path, DoctorReport* rp) {
  DoctorReport& r = *rp;
  if (!r.present) {
    r.findings.push_back(shm_path + " does not exist: programs that use POSIX shared memory will fail");
    r.size_problem = true;
  } else if (r.host_ipc && r.in_container) {
    r.findings.push_back("this container shares the host's IPC namespace and /dev/shm");
  } else if (r.size_bytes <= 64 * kMiB && !r.in_container) {
    r.findings.push_back("the host's /dev/shm is only " + FormatSize(r.size_bytes) +
                         ": programs on the host that use POSIX shared memory will run out");
    r.size_problem = true;
  } else if (r.size_bytes <= 64 * kMiB) {
    std::string who = "PyTorch DataLoader workers, Ray and NCCL need more";
    auto biggest = std::max_element(r.workloads.begin(), r.workloads.end(),
                                    [](const DoctorWorkload& a, const DoctorWorkload& b) { return a.bytes < b.bytes; });
    if (biggest != r.workloads.end()) {
      who = biggest->name + " runs here (pid " + std::to_string(biggest->pid) + ") and wants " +
            FormatSize(biggest->bytes) + "; with less: " + biggest->symptom;
    }
    r.findings.push_back("/dev/shm is " + FormatSize(r.size_bytes) +
                         ", the 64MiB default of Docker, containerd and CRI-O: " + who);
    r.size_problem = true;
  }
  int64_t leaked = 0;
  for (const DoctorFile& f : r.leaked) leaked += f.bytes;
  if (r.present && r.size_bytes > 0 && r.used_bytes * 100 >= r.size_bytes * 80) {
    // Full of leaked files is the leak's problem: reclaiming them is the fix.
    bool held_fill_it = (r.used_bytes - leaked) * 100 >= r.size_bytes * 80;
    r.findings.push_back("/dev/shm is " + std::to_string(r.used_bytes * 100 / r.size_bytes) + "% full" +
                         (held_fill_it ? "" : " (" + FormatSize(leaked) + " of it in files no process holds)"));
    r.size_problem |= held_fill_it;
  }
  if (!r.leaked.empty()) {
    r.findings.push_back(std::to_string(r.leaked.size()) + " file(s), " + FormatSize(leaked) +
                         ", in /dev/shm are held by no process (leaked?)");
  }
  if (r.memcg_limit_bytes && r.size_bytes > r.memcg_limit_bytes) {
    r.findings.push_back("/dev/shm (" + FormatSize(r.size_bytes) + ") is larger than the memory limit (" +
                         FormatSize(r.memcg_limit_bytes) + "): shm pages count against it, filling it OOM-kills");
    r.size_problem = true;
  }
}

}  // namespace

Result<DoctorReport> RunDoctor(const DoctorOptions& o) {
  DoctorReport r;
  r.shm_path = o.shm_path;
  UniqueFd fd(::open(o.shm_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  r.present = fd.valid();
  r.ipc_ns = NsInode(o.proc, "ipc");
  r.host_ipc = r.ipc_ns == kInitIpcNs;
  DetectEngine(o, &r);
  ReadMount(o.proc, o.shm_path, &r);
  Memcg memcg = ReadMemcg(o.proc, "self");
  r.memcg_limit_bytes = memcg.limit_bytes;
  r.memcg_shmem_bytes = memcg.shmem_bytes;
  if (Result<std::string> sysv = ReadFile(o.proc + "/sysvipc/shm", 64 << 20); sysv.ok()) r.sysv = ParseSysvShm(*sysv);
  if (r.present) {
    SHMK_ASSIGN_OR_RETURN(ShmDir d, MeasureShmDir(fd.get()));
    r.size_bytes = d.size_bytes;
    r.used_bytes = d.used_bytes;
    r.free_bytes = d.size_bytes - d.used_bytes;
    ProcTable table = ScanProcesses({d.dev}, o.proc);
    std::sort(d.files.begin(), d.files.end(), [](const ShmFile& a, const ShmFile& b) { return a.bytes > b.bytes; });
    for (const ShmFile& f : d.files) {
      DoctorFile df{o.shm_path + "/" + f.path, f.bytes, {}, ""};
      if (auto it = table.holders.find(f.key); it != table.holders.end()) {
        for (const HolderRef& h : it->second) df.holders.push_back({h.pid, ProcCommand(h.pid, o.proc)});
      } else {
        df.leak_reason = "no process holds it";
        r.leaked.push_back(df);
      }
      if (r.largest.size() < 10) r.largest.push_back(df);
    }
  }
  std::vector<std::pair<pid_t, std::string>> commands = Commands(o.proc);
  Workloads(commands, &r);
  Findings(o.shm_path, &r);
  ExplainSizeSource(o, &r);
  Fixes(&r);
  Frameworks(commands, r, &r.warnings);
  return r;
}

Json DoctorToJson(const DoctorReport& r) {
  auto files = [](const std::vector<DoctorFile>& v) {
    Json a = Json::array();
    for (const DoctorFile& f : v) {
      Json h = Json::array();
      for (const auto& [pid, cmd] : f.holders) h.push_back({{"pid", pid}, {"command", cmd}});
      a.push_back({{"path", f.path}, {"bytes", f.bytes}, {"holders", h}, {"leakReason", f.leak_reason}});
    }
    return a;
  };
  Json sysv = Json::array();
  for (const SysvSegment& s : r.sysv) {
    sysv.push_back({{"shmid", s.shmid}, {"bytes", s.bytes}, {"nattch", s.nattch}, {"cpid", s.cpid}});
  }
  Json workloads = Json::array();
  for (const DoctorWorkload& w : r.workloads) {
    workloads.push_back(
        {{"name", w.name}, {"pid", w.pid}, {"shmBytes", w.bytes}, {"symptom", w.symptom}, {"source", w.source}});
  }
  return {{"schemaVersion", kJsonSchemaVersion},
          {"shm",
           {{"path", r.shm_path},
            {"present", r.present},
            {"sizeBytes", r.size_bytes},
            {"usedBytes", r.used_bytes},
            {"freeBytes", r.free_bytes},
            {"source", r.mount_source},
            {"fstype", r.fstype},
            {"options", r.mount_options}}},
          {"ipc", {{"namespace", r.ipc_ns}, {"host", r.host_ipc}}},
          {"engine", r.engine},
          {"sizeSource", r.size_source},
          {"inContainer", r.in_container},
          {"sysv", sysv},
          {"largest", files(r.largest)},
          {"leaked", files(r.leaked)},
          {"memcg", {{"limitBytes", r.memcg_limit_bytes}, {"shmemBytes", r.memcg_shmem_bytes}}},
          {"findings", r.findings},
          {"fixes", r.fixes},
          {"warnings", r.warnings},
          {"workloads", workloads}};
}

// Every value from the system (paths, file names, commands, mount options) is
// escaped for the terminal: /dev/shm is writable by everyone in the container.
std::string DoctorToText(const DoctorReport& r) {
  std::ostringstream o;
  auto row = [&](const std::string& k, const std::string& v) {
    o << k << std::string(16 - std::min<size_t>(15, k.size()), ' ') << v << "\n";
  };
  if (r.present) {
    row(TermEscape(r.shm_path),
        FormatSize(r.size_bytes) + ", " + FormatSize(r.used_bytes) + " used, " + FormatSize(r.free_bytes) + " free");
    row("mount", TermEscape(r.fstype + " \"" + r.mount_source + "\" " + r.mount_options));
  } else {
    row(TermEscape(r.shm_path), "missing");
  }
  row("IPC namespace", std::to_string(r.ipc_ns) + (r.host_ipc ? " (the host's)" : " (private)"));
  row("SysV segments", r.sysv.empty() ? "none" : std::to_string(r.sysv.size()));
  row("memory cgroup", "limit " + (r.memcg_limit_bytes ? FormatSize(r.memcg_limit_bytes) : std::string("none")) +
                           ", shmem charged " + FormatSize(r.memcg_shmem_bytes));
  row("engine", TermEscape(r.engine));
  if (!r.size_source.empty()) row("size from", TermEscape(r.size_source));
  if (!r.largest.empty()) {
    o << "largest files\n";
    for (const DoctorFile& f : r.largest) {
      o << "  " << FormatSize(f.bytes) << "  " << TermEscape(f.path);
      if (f.holders.empty()) o << "  (no holder)";
      for (const auto& [pid, cmd] : f.holders) o << "  pid " << pid << " " << TermEscape(cmd);
      o << "\n";
    }
  }
  for (const std::string& f : r.findings) o << "problem: " << TermEscape(f) << "\n";
  for (const std::string& w : r.warnings) o << "note: " << TermEscape(w) << "\n";
  if (!r.findings.empty()) {
    for (const std::string& f : r.fixes) o << "fix: " << TermEscape(f) << "\n";
  }
  if (r.findings.empty()) {
    o << "ok: nothing wrong with shared memory " << (r.in_container ? "in this container" : "on this host") << "\n";
  }
  return o.str();
}

}  // namespace shmkeeper
