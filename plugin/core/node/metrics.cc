#include "node/metrics.h"

#include <sstream>

#include "base/status.h"
#include "node/exposition.h"
#include "shmkeeper/version.h"

namespace shmkeeper {

namespace {

// A label value as exposition text: valid UTF-8 (bytes that are not: the
// text \xNN, as the gRPC API shows them), backslash, quote and newline escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : EscapeInvalidUtf8(v)) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string PodLabels(const PodKey& k) {
  return "namespace=\"" + Escape(k.ns) + "\",pod=\"" + Escape(k.name) + "\",uid=\"" + Escape(k.uid) + "\",kind=\"" +
         PodKindName(k.kind) + "\"";
}

// The count of `key` in `m`, 0 when never counted.
int64_t CountOf(const std::map<std::string, int64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

void RenderNriMetrics(const NriState& n, std::ostringstream& o) {
  if (n.socket.empty()) return;  // agent.nri.socket off: no series
  Family(o, "shmkeeper_nri_connected", "gauge",
         "1 while the agent is registered as an NRI plugin with the runtime (agent.nri.socket).")
      .Add(Label("runtime", Escape(n.runtime_name)) + "," + Label("version", Escape(n.runtime_version)),
           n.connected ? 1 : 0);
  Family(o, "shmkeeper_nri_connections_total", "counter",
         "NRI registrations that succeeded (the first, then one per reconnection after the runtime restarted).")
      .Add(n.connections);
  Family(o, "shmkeeper_nri_connect_failures_total", "counter", "NRI connects or registrations that failed.")
      .Add(n.connect_failures);
  Family decisions(o, "shmkeeper_nri_decisions_total", "counter",
                   "CreateContainer calls answered with a decision, by action (resize, keep, skip).");
  for (const char* action : {"resize", "keep", "skip"})
    decisions.Add(Label("action", action), CountOf(n.decisions, action));
  Family(o, "shmkeeper_nri_refusals_total", "counter",
         "CreateContainer calls refused (a bad size): the container fails to create with the wrapper's reason.")
      .Add(n.refusals);
  Family(o, "shmkeeper_nri_failures_total", "counter",
         "CreateContainer calls that failed inside the agent, answered per onInternalError (no adjustment, or "
         "refused).")
      .Add(n.failures);
  Family injections(o, "shmkeeper_nri_injections_total", "counter",
                    "The sharing runtime's injection answered to CreateContainer, by what (preload, cuda-ipc) and "
                    "outcome (injected; skipped: an opt-out, the policy, a non-glibc image; undecided: the image could "
                    "not be read).");
  for (const std::string what : {"preload", "cuda-ipc"}) {
    for (const std::string outcome : {"injected", "skipped", "undecided"}) {
      if (what == "cuda-ipc" && outcome == "undecided") continue;
      injections.Add(Label("what", what) + "," + Label("outcome", outcome),
                     CountOf(n.injections, what + "/" + outcome));
    }
  }
  Family late(o, "shmkeeper_nri_late_total", "counter",
              "Pods created while the agent was away (stopped, restarting, too slow for the runtime's timeout), "
              "caught up at a (re)connection, by outcome: resized (after their first process started: sized by "
              "nri-late), refused (a bad size, left as it is), failed.");
  for (const char* outcome : {"resized", "refused", "failed"})
    late.Add(Label("outcome", outcome), CountOf(n.late, outcome));
  Family(o, "shmkeeper_nri_abandoned_total", "counter",
         "CreateContainer calls the runtime stopped waiting for (its plugin request timeout): not decided; the pod is "
         "caught up at the next connection.")
      .Add(n.abandoned);
}

}  // namespace

namespace {

void RenderAgentMetrics(const NodeSnapshot* snap, const Agent& agent, std::ostringstream& o) {
  Family(o, "shmkeeper_build_info", "gauge", "Always 1; the agent's version and the commit it was built from.")
      .Add(Label("version", Escape(SHMKEEPER_VERSION)) + "," + Label("commit", Escape(SHMKEEPER_COMMIT)), 1);
  ConfigFileState cfg = agent.config_file_state();
  Family(o, "shmkeeper_config_valid", "gauge",
         "1 when the policy file parsed at the last load or reload (SIGHUP); 0: it is invalid and the previous policy "
         "runs on.")
      .Add(cfg.valid ? 1 : 0);
  Family(o, "shmkeeper_config_last_reload_success_timestamp_seconds", "gauge", "Unix time the running policy was read.")
      .Add(PromFloat(std::chrono::duration<double>(cfg.loaded.time_since_epoch()).count()));
  Family(o, "shmkeeper_up", "gauge", "1 once the agent has completed a scan.").Add(snap ? 1 : 0);
  Family(o, "shmkeeper_reclaimed_segments_total", "counter", "Segments reclaimed by the agent.")
      .Add(agent.reclaimed_total());
  Family(o, "shmkeeper_reclaimed_bytes_total", "counter", "Bytes freed by reclaim.").Add(agent.reclaimed_bytes_total());
}

void RenderIntakeMetrics(const AgentCounters& c, const Reporter& rep, std::ostringstream& o) {
  Family rejected(o, "shmkeeper_event_datagrams_rejected_total", "counter",
                  "Event datagrams refused (creator claims that failed verification, malformed messages), by reason.");
  for (ClaimRejection r : kAllClaimRejections) {
    auto it = c.datagrams_rejected.find(ClaimRejectionName(r));
    rejected.Add(Label("reason", ClaimRejectionName(r)), it == c.datagrams_rejected.end() ? 0 : it->second);
  }
  Family dropped(o, "shmkeeper_event_datagrams_dropped_total", "counter",
                 "Event datagrams dropped before they could be read (no sender credentials, a receive error), by "
                 "reason.");
  dropped.Add(Label("reason", "no_credentials"), rep.Count(kDatagramsNoCredentials));
  dropped.Add(Label("reason", "receive_error"), rep.Count(kDatagramsReceiveErrors));
  dropped.Add(Label("reason", "rate_limited"), rep.Count(kDatagramsRateLimited));
  Family(o, "shmkeeper_enrichment_errors_total", "counter",
         "Scans whose container names and labels could not be read from a runtime API, by source.")
      .Add(Label("source", "docker"), rep.Count(kDockerEnrichmentErrors));
  Family(o, "shmkeeper_watcher_errors_total", "counter",
         "inotify failures (the watcher not started, a directory that cannot be watched): changes wait for the "
         "periodic scan.")
      .Add(rep.Count(kWatcherErrors));
}

void RenderReclaimMetrics(const AgentCounters& c, std::ostringstream& o) {
  Family kept(o, "shmkeeper_reclaim_kept_total", "counter",
              "Reclaim candidates kept because the protocol found a holder, a change or an error, or the caller's "
              "deadline passed before their removal, by reason.");
  for (SkipReason r : {SkipReason::kHeld, SkipReason::kOpened, SkipReason::kChanged, SkipReason::kLinked,
                       SkipReason::kError, SkipReason::kDeadline}) {
    auto it = c.reclaim_kept.find(r);
    kept.Add(Label("reason", SkipReasonName(r)), it == c.reclaim_kept.end() ? 0 : it->second);
  }
  Family(o, "shmkeeper_reclaim_pinned_total", "counter",
         "Removed files whose inode outlived the reclaim: a reference /proc does not show (an O_PATH descriptor in "
         "flight) still pins their memory, which was not counted as freed.")
      .Add(c.reclaim_pinned);
  Family(o, "shmkeeper_reclaim_errors_total", "counter", "Reclaim removals that failed with an error.")
      .Add(c.reclaim_errors);
  Family(o, "shmkeeper_reclaim_raced_total", "counter",
         "Removed files that an open(2) begun before the quarantine rename reached afterwards.")
      .Add(c.reclaim_raced);
  Family(o, "shmkeeper_quarantine_restored_total", "counter", "Files renamed back from an interrupted reclaim.")
      .Add(c.restored_from_quarantine);
}

void RenderObserverMetrics(const Agent& agent, const Reporter& rep, std::ostringstream& o) {
  Family mode(o, "shmkeeper_observer_mode", "gauge",
              "How the agent learns who holds shared memory: fanotify (kernel events and lease probes) or scan "
              "(walking /proc on every scan; fanotify unavailable or agent.observer: scan).");
  for (const char* m : {"fanotify", "scan"})
    mode.Add(Label("mode", m), std::string(agent.observer_mode()) == m ? 1 : 0);
  ObserverCounters oc = agent.observer_counters();
  Family(o, "shmkeeper_observer_events_total", "counter", "fanotify events read (the kernel merges them).")
      .Add(oc.events);
  Family(o, "shmkeeper_observer_overflows_total", "counter",
         "fanotify queue overflows (events lost): each is followed by a walk of /proc.")
      .Add(oc.overflows);
  Family(o, "shmkeeper_observer_probes_total", "counter", "Lease probes of files that events named (or never probed).")
      .Add(oc.probes);
  Family(o, "shmkeeper_observer_other_agents", "gauge",
         "Other shmkeeperd processes on this node registered as probers in the state directory (a --read-only agent "
         "beside this one): their lease probes are not use. 0 while one runs beside: it is not recognised (another "
         "pid namespace or state directory) and its probes keep files in use.")
      .Add(oc.other_agents);
  Family(o, "shmkeeper_observer_prober_events_total", "counter",
         "Opens and closes by the other agents' lease probes and reclaims, not taken for use.")
      .Add(oc.prober_events);
  Family(o, "shmkeeper_observer_inode_marks", "gauge",
         "fanotify inode marks on files the observer tracks (each probed file's opens and closes are events).")
      .Add(oc.inode_marks);
  Family(o, "shmkeeper_observer_mark_fallbacks_total", "counter",
         "tmpfs where an inode mark could not be added (mark limit, error): watched for every open and close "
         "instead.")
      .Add(oc.mark_fallbacks);
  Family(o, "shmkeeper_observer_holder_walks_total", "counter",
         "Walks of /proc for files probed held whose holder no event and no recent creator named (at most one per 10 "
         "s, for all such files together).")
      .Add(oc.holder_walks);
  Family(o, "shmkeeper_observer_create_disarms_total", "counter",
         "Creates that disarmed their tmpfs's create events until the next scan re-armed them (one create event "
         "per scan per tmpfs).")
      .Add(oc.disarms);
  Family(o, "shmkeeper_observer_superblock_changes_total", "counter",
         "Watched device numbers found on a new tmpfs (the kernel reused the number of one that went): everything "
         "known under the number was dropped and the new tmpfs marked afresh.")
      .Add(oc.superblock_changes);
  Family(o, "shmkeeper_observer_unmarked_filesystems", "gauge",
         "Pod tmpfs whose filesystem mark failed at the last try (retried every scan; their files are kept, "
         "shmkeeper_node_segments_kept{reason=\"unobserved\"}).")
      .Add(oc.unmarked);
  Family(o, "shmkeeper_observer_mark_retries_total", "counter",
         "Filesystem marks that succeeded at a later scan after one failed.")
      .Add(oc.mark_retries);
  Family audit(o, "shmkeeper_observer_audit_disagreements_total", "counter",
               "Files where the slow audit's walk of /proc disagreed with the observer: missed_event (the "
               "event-derived verdict was wrong), walk_only (a holder only /proc shows, e.g. an O_PATH descriptor).");
  audit.Add(Label("kind", "missed_event"), rep.Count(kAuditMissedEvent));
  audit.Add(Label("kind", "walk_only"), rep.Count(kAuditWalkOnly));
  Family errors(o, "shmkeeper_observer_errors_total", "counter",
                "Observer failures the agent survives: a tmpfs that cannot be marked (its files are kept; retried "
                "every scan), a lease probe that fails (the file is kept as held), the prober registry that cannot be "
                "read (other agents' probes count as use).");
  errors.Add(Label("kind", "mark"), rep.Count(kObserverMarkErrors));
  errors.Add(Label("kind", "probe"), rep.Count(kObserverProbeErrors));
  errors.Add(Label("kind", "probers"), rep.Count(kObserverProberErrors));
}

void RenderScanMetrics(const NodeSnapshot& snap, std::ostringstream& o) {
  Family(o, "shmkeeper_scan_duration_seconds", "gauge", "Duration of the last full scan.")
      .Add(PromFloat(std::chrono::duration<double>(snap.duration).count()));
  Family(o, "shmkeeper_scans_total", "counter", "Full scans completed.").Add(snap.scans);
  Family(o, "shmkeeper_last_scan_timestamp_seconds", "gauge", "Unix time of the last completed scan.")
      .Add(PromFloat(std::chrono::duration<double>(snap.time.time_since_epoch()).count()));
  Family(o, "shmkeeper_node_shm_size_bytes", "gauge", "Size of the host's /dev/shm.").Add(snap.host_shm_size_bytes);
  Family(o, "shmkeeper_node_shm_used_bytes", "gauge", "Used bytes of the host's /dev/shm.")
      .Add(snap.host_shm_used_bytes);
  Family(o, "shmkeeper_node_leaked_bytes", "gauge", "Bytes in segments whose verdict is leaked, node-wide.")
      .Add(snap.leaked_bytes);
  Family(o, "shmkeeper_node_unheld_bytes", "gauge", "Bytes in segments nobody holds (unheld or leaked), node-wide.")
      .Add(snap.unheld_bytes);
  Family kept(o, "shmkeeper_node_segments_kept", "gauge",
              "Segments no process holds that the last scan did not call leaked, by reason: a mount or loop device "
              "holds it, the pid in its name runs in another pid namespace reaching its tmpfs, or those namespaces "
              "are unknown, or its tmpfs is not observed yet (unobserved); files_over_limit: every file of a tmpfs "
              "over agent.maxFilesPerPod (not judged).");
  for (const char* r : {"mount", "loop_device", "lease", "creator_in_other_pid_ns", "pid_namespaces_unknown",
                        "unobserved", "files_over_limit"}) {
    auto it = snap.kept_by_reason.find(r);
    kept.Add(Label("reason", r), it == snap.kept_by_reason.end() ? 0 : it->second);
  }
}

void RenderPodMetrics(const NodeSnapshot& snap, std::ostringstream& o) {
  struct Series {
    const char* name;
    const char* help;
    int64_t PodRecord::*field;
  };
  static constexpr Series kSeries[] = {
      {"shmkeeper_pod_shm_size_bytes", "Size of the pod's /dev/shm tmpfs.", &PodRecord::size_bytes},
      {"shmkeeper_pod_shm_used_bytes", "Used bytes of the pod's /dev/shm (statfs).", &PodRecord::used_bytes},
      {"shmkeeper_pod_shm_unlinked_bytes", "Bytes held by unlinked files.", &PodRecord::unlinked_bytes},
      {"shmkeeper_pod_sysv_bytes", "SysV shared memory in the pod's IPC namespace.", &PodRecord::sysv_bytes},
      {"shmkeeper_pod_memcg_shmem_bytes", "shmem charged to the pod's memory cgroup.", &PodRecord::memcg_shmem_bytes},
      {"shmkeeper_pod_leaked_bytes", "Bytes in the pod's segments whose verdict is leaked.", &PodRecord::leaked_bytes},
      {"shmkeeper_pod_unheld_bytes", "Bytes in the pod's segments that nobody holds (unheld or leaked).",
       &PodRecord::unheld_bytes},
  };
  for (const Series& s : kSeries) {
    Family f(o, s.name, "gauge", s.help);
    for (const PodRecord& p : snap.pods) f.Add(PodLabels(p.key), p.*s.field);
  }
  Family files(o, "shmkeeper_pod_shm_files", "gauge", "Files in the pod's /dev/shm.");
  for (const PodRecord& p : snap.pods) files.Add(PodLabels(p.key), p.files);
  Family over(o, "shmkeeper_pod_files_over_limit", "gauge",
              "1 when the pod's /dev/shm holds more entries than agent.maxFilesPerPod: it is not listed further and "
              "none of its files is judged (all kept).");
  for (const PodRecord& p : snap.pods) over.Add(PodLabels(p.key), p.files_over_limit ? 1 : 0);
}

}  // namespace

std::string RenderMetrics(const NodeSnapshot* snap, const Agent& agent) {
  std::ostringstream o;
  AgentCounters c = agent.counters();
  const Reporter& rep = agent.reporter();
  RenderAgentMetrics(snap, agent, o);
  RenderIntakeMetrics(c, rep, o);
  RenderReclaimMetrics(c, o);
  RenderObserverMetrics(agent, rep, o);
  Family walks(o, "shmkeeper_proc_walks_total", "counter",
               "Scans that walked every task in /proc for holders, by reason (startup, overflow, audit, request; "
               "scan: every scan in scan mode), and passes over every process's namespaces and mounts for the "
               "evidence of leak verdicts when a signal said they changed (evidence).");
  for (const char* r : {"startup", "overflow", "audit", "request", "scan", "evidence"}) {
    auto it = c.walks.find(r);
    walks.Add(Label("reason", r), it == c.walks.end() ? 0 : it->second);
  }
  if (!snap) return o.str();
  RenderScanMetrics(*snap, o);
  RenderPodMetrics(*snap, o);
  RenderNriMetrics(agent.nri_stats().state(), o);
  return o.str();
}

}  // namespace shmkeeper
