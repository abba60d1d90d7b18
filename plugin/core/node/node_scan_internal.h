// What the modules of the Scanner (node_scan.h) share; internal to
// plugin/core/node. The Scanner is split by concern:
//   node_scan.cc           the order of one scan (Scan), its memory between
//                          scans, the per-pod caches (access process, memcg)
//   node_scan_pods.cc      pods and their tmpfs: grouping containers, Docker
//                          names, opening, marking and listing each tmpfs
//                          (the listing cache), quarantine restore
//   node_scan_verdicts.cc  held, unheld or leaked: files (FileLeaks) and SysV
//                          segments (SysvLeaks), and the evidence they read
//   node_scan_report.cc    what a pod's row shows: its top segments
//   pod_bound.cc           agent.maxFilesPerPod
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/fileutil.h"
#include "base/status.h"
#include "node/node_scan.h"

namespace shmkeeper::node_scan_detail {

using SteadyClock = std::chrono::steady_clock;

// The pod's /dev/shm (its access process's, or its watched host directory),
// opened without following symlinks.
Result<UniqueFd> OpenPodShm(const PodRecord& p, const std::string& proc);

// `rel` as the pod sees it: /dev/shm/<rel>, or below its host directory.
std::string DisplayPath(const PodRecord& p, const std::string& rel);

// The order in which pods' segments are judged: on a tmpfs several pods
// share, the owner's turn comes first and the others' segments are not
// counted again.
std::vector<size_t> OwnersFirst(const std::vector<PodRecord>& pods);

// The `n` largest files, with their holders and the holders' commands.
// `held`: the files judged held (by the walk or the observer); `observed`:
// pids the observer saw using them, confirmed one by one when the scan did
// not walk.
std::vector<SegmentRecord> TopSegments(const PodRecord& p, const std::vector<ShmFile>& files, const ProcTable& table,
                                       const NodeRefs* refs, size_t n, const std::map<FileKey, LeakState>& verdicts,
                                       const std::set<FileKey>& held_keys,
                                       const std::map<FileKey, std::vector<pid_t>>& observed, const std::string& proc);

}  // namespace shmkeeper::node_scan_detail
