"""The shipped rules and dashboard against a real Prometheus (Debian's, with a
private config, data dir and port) scraping a private shmkeeperd: a watched
host tmpfs (`agent.hostShmDirs`) fills to 90%, the 80% alert fires with the
pod's labels within the rule's `for` plus two scrape intervals, and resolves
when the file is removed; every dashboard query parses and returns data.
Before anything is filled, the scrape of the healthy agent is checked as it
arrives: `time() - shmkeeper_last_scan_timestamp_seconds` within two scan
intervals (the timestamp printed with full precision), and the shipped
alerts fire nothing, not even pending."""
import copy
import json
import os
import re
import shutil
import time

import pytest
import yaml

from harness import AGENTD, REPO, AgentProcess, HostTmpfs, PrivatePrometheus, require, run, wait_for

MiB = 1 << 20
SIZE = 16 * MiB
SCRAPE = 1  # seconds: scrape and rule evaluation interval
FOR = 4     # seconds: the test copy's `for:` of the usage and agent-down alerts (the shipped rules: promtool)
MONITORING = REPO / "deploy" / "monitoring"


def rules_for_test(for_seconds):
    """The shipped rules with a short `for:` on the usage and agent-down alerts; everything else as shipped."""
    rules = yaml.safe_load((MONITORING / "shmkeeper-rules.yaml").read_text())
    out = copy.deepcopy(rules)
    for group in out["groups"]:
        for r in group["rules"]:
            if r.get("alert") in ("ShmkeeperPodShmNearlyFull", "ShmkeeperPodShmFull", "ShmkeeperAgentDown"):
                r["for"] = f"{for_seconds}s"
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(shutil.which("prometheus") is not None, "prometheus is not installed")
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    base = tmp_path_factory.mktemp("prom")
    shm = HostTmpfs(base / "shm", SIZE)
    agent = prom = None
    try:
        agent = AgentProcess.watching(base, [shm.path], metrics_address="127.0.0.1:0", scan_interval_s=SCRAPE).start()
        config = {"global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": f"{SCRAPE}s"},
                  "scrape_configs": [{"job_name": "shmkeeper", "static_configs": [
                      {"targets": [f"127.0.0.1:{agent.metrics_port()}"], "labels": {"node": "testnode"}}]}]}
        prom = PrivatePrometheus(base / "prometheus", config, rules_for_test(FOR)).start()
        wait_for(lambda: prom.query(f'shmkeeper_pod_shm_size_bytes{{pod="{shm.path}"}} == {SIZE}'), timeout=30,
                 what="the pod's size in Prometheus")
        prom.scraped_at = time.time()  # the first scrape is in: rules see real samples from here on
        yield agent, prom, shm
    finally:
        if prom:
            prom.stop()
        if agent:
            agent.stop()
        shm.umount()


def test_real_scrape_scan_age_within_two_intervals_and_no_alert_on_a_healthy_agent(stack):  # first: nothing filled
    agent, prom, shm = stack
    line = next(l for l in agent.metrics_text().splitlines() if l.startswith("shmkeeper_last_scan_timestamp_seconds "))
    assert "e" not in line.split()[1].lower(), f"timestamp not printed in full: {line}"
    build = prom.query("shmkeeper_build_info")
    assert len(build) == 1 and build[0]["value"][1] == "1" and build[0]["metric"]["version"], build
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", build[0]["metric"]["commit"]), build
    for _ in range(5):  # five samples a scrape interval apart
        at_scrape = prom.query("timestamp(shmkeeper_last_scan_timestamp_seconds) - shmkeeper_last_scan_timestamp_seconds")
        now = prom.query("time() - shmkeeper_last_scan_timestamp_seconds")
        assert len(at_scrape) == 1 and len(now) == 1, (at_scrape, now)
        age_at_scrape, age_now = float(at_scrape[0]["value"][1]), float(now[0]["value"][1])
        print(f"scan age at the scrape {age_at_scrape:.3f}s, at the query {age_now:.3f}s (interval {SCRAPE}s)")
        # The agent waits SCRAPE seconds between scans; a loaded machine stretches the scan itself.
        scan = float(prom.query("max_over_time(shmkeeper_scan_duration_seconds[1m])")[0]["value"][1])
        assert -0.5 <= age_at_scrape <= 2 * SCRAPE + 2 * scan, scan
        assert -0.5 <= age_now <= 2 * SCRAPE + 2 * scan + SCRAPE + 1  # plus one scrape interval (and slack)
        time.sleep(SCRAPE)
    # Every rule evaluated several times over real samples by now; none may be pending or firing. (Before
    # the first scrape ShmkeeperAgentAbsent is pending for an evaluation or two: no target has reported yet.)
    window = int(time.time() - prom.scraped_at)
    assert window >= 5
    assert prom.query(f"count_over_time(ALERTS[{window}s])") == []
    assert prom.api("alerts")["alerts"] == []


def used_ratio(agent, shm):
    m = agent.metrics()
    key = next((k for k in m if k.startswith("shmkeeper_pod_shm_used_bytes{") and f'pod="{shm.path}"' in k), None)
    return m[key] / SIZE if key else 0


def test_80_percent_alert_fires_with_the_pods_labels_and_resolves(stack):
    agent, prom, shm = stack
    assert prom.alerts("ShmkeeperPodShmNearlyFull", "pending") + prom.alerts("ShmkeeperPodShmNearlyFull") == []
    shm.fill("data", SIZE * 9 // 10)
    wait_for(lambda: used_ratio(agent, shm) >= 0.89, timeout=10, interval=0.05, what="the agent to see 90%")
    t0 = time.monotonic()
    firing = wait_for(lambda: prom.alerts("ShmkeeperPodShmNearlyFull"), timeout=FOR + 10 * SCRAPE, interval=0.1,
                      what="ShmkeeperPodShmNearlyFull firing")
    elapsed = time.monotonic() - t0
    print(f"80% alert firing {elapsed:.2f}s after the agent reported 90% (for {FOR}s, scrape {SCRAPE}s)")
    assert FOR <= elapsed <= FOR + 2 * SCRAPE + 0.5  # `for` is honoured, and no more than two intervals late
    (alert,) = firing
    labels = alert["labels"]
    assert labels["pod"] == str(shm.path) and labels["kind"] == "host" and labels["uid"] == f"host:{shm.path}"
    assert labels["job"] == "shmkeeper" and labels["node"] == "testnode" and labels["severity"] == "warning"
    assert 0.89 <= float(alert["value"]) < 0.95
    description = alert["annotations"]["description"]
    assert re.search(rf"^host {shm.path} on 127.0.0.1:\d+ uses 9\d(\.\d+)?% of its 16MiB /dev/shm", description)
    assert "shmkeeper.io/shm-size (e.g. 32Mi)" in description
    assert prom.alerts("ShmkeeperPodShmFull") + prom.alerts("ShmkeeperPodShmFull", "pending") == []
    shm.remove("data")
    wait_for(lambda: not prom.alerts("ShmkeeperPodShmNearlyFull"), timeout=5 * SCRAPE + 5, interval=0.1,
             what="the alert to resolve")
    assert prom.alerts("ShmkeeperPodShmNearlyFull", "pending") == []


# Series the dashboard and rules use that the agent of this branch does not export yet (the reclaim
# work adds them); a query naming one of these may come back empty, every other query must return data.
NOT_YET_EXPORTED = {"shmkeeper_last_scan_timestamp_seconds", "shmkeeper_reclaim_errors_total",
                    "shmkeeper_reclaim_kept_total", "shmkeeper_event_datagrams_rejected_total",
                    "shmkeeper_pod_unheld_bytes", "shmkeeper_node_unheld_bytes", "shmkeeper_reclaim_raced_total",
                    "shmkeeper_quarantine_restored_total"}
GRAFANA_VARIABLES = {"$node": ".*", "$namespace": ".*", "$__rate_interval": "1m"}


def dashboard_queries():
    d = json.loads((MONITORING / "shmkeeper-dashboard.json").read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            out.append((f'{p["title"]} / {t["refId"]}', expr))
    return out


def test_dashboard_queries_parse_with_promtool(tmp_path):
    require(shutil.which("promtool") is not None, "promtool is not installed")
    queries = dashboard_queries()
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}:check", "expr": e}
                                                        for i, (_, e) in enumerate(queries)]}]}
    f = tmp_path / "dashboard-queries.yaml"
    f.write_text(yaml.safe_dump(rules))
    p = run(["promtool", "check", "rules", f], check=False)
    assert p.returncode == 0 and f"SUCCESS: {len(queries)} rules found" in p.stdout, p.stdout + p.stderr


def test_dashboard_queries_return_data(stack):
    agent, prom, shm = stack
    shm.fill("dashboard", SIZE // 4)
    exported = {k.split("{")[0] for k in agent.metrics()}
    wait_for(lambda: prom.query('count(pod:shmkeeper_pod_shm_usage:ratio > 0.2)'), timeout=15,
             what="the recording rules to see the usage")
    empty = []
    for title, expr in dashboard_queries():
        missing = set(re.findall(r"(?<![\w:])shmkeeper_\w+(?![\w:])", expr)) - exported  # recorded series excepted
        assert missing <= NOT_YET_EXPORTED, f"{title}: {expr} names series nobody exports: {missing}"
        if not missing and not prom.query(expr):
            empty.append(f"{title}: {expr}")
    shm.remove("dashboard")
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)


def test_agent_down_alert_fires_when_the_agent_stops(stack):  # last: it stops the module's agent
    agent, prom, shm = stack
    assert prom.alerts("ShmkeeperAgentDown") == []
    agent.stop()
    t0 = time.monotonic()
    (alert,) = wait_for(lambda: prom.alerts("ShmkeeperAgentDown"), timeout=FOR + 10 * SCRAPE, interval=0.1,
                        what="ShmkeeperAgentDown firing")
    assert time.monotonic() - t0 >= FOR
    assert alert["labels"]["job"] == "shmkeeper" and alert["labels"]["node"] == "testnode"
