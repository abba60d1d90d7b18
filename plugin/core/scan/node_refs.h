// What the fd tables and mappings of /proc do not show, read once per scan:
//  - files that are the source of a mount in some mount namespace (a bind of
//    one file, `-v /dev/shm/x:/data/x`, a sidecar's volume): the mount pins
//    the memory and its consumer needs the name (docs/reclaim-safety.md);
//  - files backing a loop device;
//  - for each tmpfs, the pid namespaces of the processes that have it at
//    /dev/shm: where shm_open(3) creates files, so where a pid in a runtime's
//    name (torch_<pid>_…) was taken.
// Each distinct mount namespace's mountinfo is read once, from its lowest pid
// (normally its init, whose root is the namespace's root).
//
// Thread-safety: a NodeRefs is an immutable value once read.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "scan/proc_table.h"

namespace shmkeeper {

// One reference to a file that is no process's fd or mapping.
struct FileRef {
  enum Kind { kMount, kLoop } kind = kMount;
  // "mount /data/x (mount namespace of pid 123)", "loop device /dev/loop3"
  std::string what;
  pid_t pid = 0;  // a process of the mount namespace; 0 for a loop device
};

struct NodeRefs {
  // Per tmpfs device: the path inside that tmpfs ("/x", "/d/y") of each
  // mount whose source is not the tmpfs's root, and those mounts.
  std::map<dev_t, std::map<std::string, std::vector<FileRef>>> mounts;
  std::map<FileKey, std::vector<FileRef>> loops;
  // Per tmpfs device: the pid namespaces of the processes that see it at /dev/shm.
  std::map<dev_t, std::set<ino_t>> shm_pid_ns;
  // False when a live process's mount namespace or a namespace's mountinfo
  // could not be read: shm_pid_ns is then only a lower bound.
  bool complete = true;
  // Every live (pid namespace, pid in it).
  std::set<std::pair<ino_t, pid_t>> live;

  // The references to `key`, a file at `rel` below a directory of its tmpfs
  // (a mount's source path is matched when it is "/" + rel or ends with
  // "/" + rel: a directory that is itself below the tmpfs root matches too,
  // and a false match only keeps a file).
  std::vector<FileRef> Of(const FileKey& key, const std::string& rel) const;
  bool Alive(ino_t pid_ns, pid_t ns_pid) const { return live.count({pid_ns, ns_pid}) > 0; }
};

// Reads the mount namespaces of `table`'s processes and the loop devices
// (/sys/block/loop*, their status through `dev`/loopN), keeping what concerns
// files on `devices`.
NodeRefs ReadNodeRefs(const ProcTable& table, const std::set<dev_t>& devices, const std::string& proc = "/proc",
                      const std::string& sys = "/sys", const std::string& dev = "/dev");

// The mounts of one mount namespace alone (ReadNodeRefs reads each), read
// through the first of its members (lowest pid first, with the pid
// namespace of each) whose mountinfo can be read: adds to out->mounts and
// out->shm_pid_ns, and clears out->complete when it cannot be read while a
// member still has it.
void ReadNamespaceRefs(const std::vector<pid_t>& members, const std::vector<ino_t>& pid_ns_of_members,
                       const std::set<dev_t>& devices, const std::string& proc, NodeRefs* out);

// The loop devices alone (ReadNodeRefs reads them too): adds to out->loops
// those backed by files on `devices`.
void ReadLoopRefs(const std::set<dev_t>& devices, const std::string& sys, const std::string& dev, NodeRefs* out);

// One line of /proc/<pid>/mountinfo: the mount's device, its root inside
// that filesystem and its mount point (octal escapes undone). False for a
// line that does not parse.
struct MountLine {
  dev_t dev = 0;
  std::string root, mount_point;
};
bool ParseMountInfoLine(const std::string& line, MountLine* out);

}  // namespace shmkeeper
