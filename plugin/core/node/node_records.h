// What one scan of the node finds (node_scan.h): pods, their shm usage and
// top segments, the verdict on each segment nobody holds, and the snapshot
// that carries them. Plain values: an immutable NodeSnapshot is shared with
// every reader once published.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "node/discovery.h"
#include "scan/proc_table.h"

namespace shmkeeper {

enum class PodKind { kKubernetes = 1, kCompose = 2, kContainer = 3, kHost = 4, kPodman = 5 };
// The verdict on one segment, the same word in every view (pods, leaks,
// watch, metrics, the API):
//  held    some process has it open or mapped;
//  unheld  nobody holds it, and nothing shows it was meant to be transient and
//          abandoned (creator unknown or alive, or leaks.grace not over): a
//          closed scratch file is unheld; never reclaimed;
//  leaked  nobody holds it, for leaks.grace or longer, and there is positive
//          evidence: a verified creator record, or a runtime's naming pattern
//          with a pid (torch_<pid>_…, sgl_shm_<kind>_<pid>_…) absent from every
//          pid namespace whose processes have that tmpfs at /dev/shm, and that
//          creator is dead. Only leaked segments are reclaimed.
// A file that is the source of a mount, or backs a loop device, is held.
enum class LeakState { kUnheld = 1, kLeaked = 2, kHeld = 3 };

struct PodKey {
  PodKind kind = PodKind::kContainer;
  std::string ns, name, uid;
};

struct HolderInfo {
  pid_t pid = 0;
  std::string command;
  bool mapped = false;
  // Set when the holder is no fd or mapping but a kernel reference (scan/node_refs.h):
  // "mount /data/x (mount namespace of pid 123)", "loop device /dev/loop3".
  std::string reference;
};

struct SegmentRecord {
  std::string path;  // as the pod sees it: /dev/shm/<name>
  int64_t bytes = 0;
  bool unlinked = false;
  LeakState state = LeakState::kHeld;
  std::vector<HolderInfo> holders;
};

struct PodRecord {
  PodKey key;
  std::vector<ContainerRecord> containers;
  std::string compose_project, compose_service;
  std::map<std::string, std::string> labels, annotations;
  int64_t started_sec = 0;
  // shm usage
  int64_t size_bytes = 0, used_bytes = 0, unlinked_bytes = 0;
  int64_t peak_used_bytes = 0;  // the most used_bytes the agent has seen (set by the Agent)
  int32_t files = 0;
  int64_t sysv_bytes = 0;
  int32_t sysv_segments = 0;
  int64_t memcg_shmem_bytes = 0;
  int64_t requested_bytes = 0;
  std::string requested_source;
  int64_t memory_limit_bytes = 0;  // the memory limit "auto" sized it from (0 = none)
  std::string memory_limit_source;
  std::string sized_by;  // runtime, hook or reconcile; "" when shmkeeper did not size it
  std::vector<SegmentRecord> top_segments;
  int64_t leaked_bytes = 0;  // segments whose verdict is leaked
  int64_t unheld_bytes = 0;  // segments nobody holds (unheld and leaked)
  // The tmpfs is another pod's (a shared IPC namespace): its segments are
  // counted and listed under that pod only.
  bool shm_counted_elsewhere = false;
  // how to reach it
  pid_t access_pid = 0;             // a live process of the pod (0 for host directories)
  uint64_t access_start_ticks = 0;  // its start time as discovery checked it this scan (0 = unknown)
  std::string host_dir;             // kHost: the watched directory
  std::string shm_host_source;      // the host tmpfs bound at the pod's /dev/shm, when the spec says so
  dev_t shm_dev = 0;
  // The identity of the superblock at shm_dev (scan/fs_identity.h; 0 =
  // unknown): a device number is reused by later tmpfs, this never is.
  uint64_t shm_fsid = 0;
  bool shares_host_shm = false;
  // annotation shmkeeper.io/reclaim: report or off: the pod opts out of the
  // node's leaks.reclaim: auto (no annotation opts in beyond the node).
  bool reclaim_opt_out = false;
  // The tmpfs holds more than ScanOptions::max_files_per_pod entries
  // (agent.maxFilesPerPod, `files_limit`): its listing stopped there, none of
  // its files is judged (all kept, kept_by_reason "files_over_limit"), `files`
  // is the tmpfs's inodes in use (statfs, directories included; the limit + 1
  // when the tmpfs has no inode limit), and top_segments and unlinked_bytes
  // are empty.
  bool files_over_limit = false;
  int32_t files_limit = 0;
};

struct LeakRecord {
  PodKey pod;
  std::string path;  // /dev/shm/<rel>, or the host directory path; empty for SysV
  std::string rel;   // relative to the pod's shm root
  int32_t sysv_id = -1;
  int64_t bytes = 0;
  int64_t age_sec = 0;
  double unheld_for_sec = 0;
  LeakState state = LeakState::kUnheld;
  pid_t creator_pid = 0;  // in the pod's pid namespace
  std::string creator_source, name_pattern;
  std::string creator_command;  // from a creator record
  bool creator_dead = false;
  pid_t last_holder_pid = 0;
  std::string last_holder_command;
  bool reclaimable = false;
  // removal handles
  FileKey key;
  uint64_t fsid = 0;  // the superblock `key` is on (PodRecord::shm_fsid): removal requires it still
  pid_t access_pid = 0;
  std::string host_dir;
  // The host tmpfs behind the pod's /dev/shm: removal goes through it when the
  // access process sees /dev/shm read-only (a CRI sandbox's pause container).
  std::string shm_host_source;
  pid_t sysv_cpid = 0;
  // What the scan saw of the SysV segment: removal requires all of it unchanged.
  pid_t sysv_lpid = 0;
  int64_t sysv_atime = 0, sysv_dtime = 0;
  bool reclaim_opt_out = false;  // its pod's
};

struct NodeSnapshot {
  std::string hostname;
  int64_t host_shm_size_bytes = 0, host_shm_used_bytes = 0;
  int64_t pods_shm_used_bytes = 0, leaked_bytes = 0, unheld_bytes = 0;
  int64_t restored_from_quarantine = 0;  // files renamed back after an interrupted reclaim
  // Segments that no process holds but that are not leaked, by reason:
  // mount, loop_device (held by a kernel reference), creator_in_other_pid_ns
  // (the name's pid runs in another pid namespace that reaches the tmpfs),
  // pid_namespaces_unknown (not every such namespace could be read), lease
  // (a reclaim's lease was refused and is still: a kernel reference),
  // unobserved (the observer could not mark the tmpfs yet: retried every
  // scan, its files kept meanwhile).
  // files_over_limit (the files of a tmpfs with more than max_files_per_pod
  // entries: never listed whole, never judged).
  std::map<std::string, int64_t> kept_by_reason;
  std::vector<PodRecord> pods;
  std::vector<LeakRecord> leaks;
  std::chrono::system_clock::time_point time;
  std::chrono::nanoseconds duration{0};
  int64_t scans = 0;
  bool walked = false;  // this scan walked /proc for holders (else the observer answered)
  int64_t walks = 0;    // scans that walked /proc, so far
  // Passes over every process this scan made for the node facts its
  // verdicts read (node_facts.h: none while no signal says they changed).
  int64_t evidence_walks = 0;
  // Directory entries the scan stat'ed listing the pods' tmpfs (a listing
  // the cache reused costs none): at most agent.maxFilesPerPod per tmpfs.
  int64_t listed_entries = 0;
};

}  // namespace shmkeeper
