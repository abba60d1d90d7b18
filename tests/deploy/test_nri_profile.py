"""The NRI profile (components/nri, the chart's runtime.integration: nri, its
default) against the RuntimeClass profile (the kustomize base, the chart's
runtime.integration: runtimeclass), rendered by the real helm v4 and kubectl
1.35 (tests/lib/k8s_render.py): under NRI nothing touches the runtime (no
RuntimeClass, no RBAC for the node label, no init container that mounts the
runtime's config, the host's /run or a token, none privileged), the agent
mounts the host's /var/run/nri and its policy names the socket (parsed by the
agent's own parser); the RuntimeClass profile keeps all of that and names no
NRI socket. node-setup.sh with SHMKEEPER_INTEGRATION=nri copies the preload
library to the host and leaves the runtime's config alone. test_chart.py
compares chart and kustomize for both; test_schema.py validates them."""
import json
import os
import socket
import subprocess

import pytest
import yaml

from harness import AGENTD, BUILD, run
from k8s_render import BASE, CHART, render_chart, render_variant
from test_deploy import SETUP, image_dirs

NRI_SOCKET = "/var/run/nri/nri.sock"
RUNTIME_WRITES = ("/host/runtime-config", "/host/run", "/var/run/secrets/kubernetes.io/serviceaccount")


def daemonset(docs, name="shmkeeper"):
    return next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == name)


def policy(docs):
    return yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])


def renders(helm, tmp_path, profile):
    """{name: objects} of a profile as the chart (defaults or runtimeclass) and kustomize render it."""
    if profile == "nri":
        return {"chart default": render_chart(helm, tmp_path / "c1"),
                "chart nri": render_chart(helm, tmp_path / "c2", {"runtime": {"integration": "nri"}}),
                "kustomize nri": render_variant(tmp_path, "nri")}
    return {"chart runtimeclass": render_chart(helm, tmp_path / "c3", {"runtime": {"integration": "runtimeclass"}}),
            "kustomize base": render_variant(tmp_path, "base")}


@pytest.fixture
def dirs(tmp_path):
    for d in ("c1", "c2", "c3"):
        (tmp_path / d).mkdir()
    return tmp_path


def test_nri_profile_installs_nothing_into_the_runtime(helm, dirs):
    for source, docs in renders(helm, dirs, "nri").items():
        kinds = {d["kind"] for d in docs}
        assert "RuntimeClass" not in kinds, source
        assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, source  # no node label to set
        for name in ("shmkeeper", "shmkeeper-uninstall"):
            pod = daemonset(docs, name)["spec"]["template"]["spec"]
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert "runtime-config" not in volumes and "node-label-token" not in volumes, (source, name)
            for c in pod["initContainers"]:
                assert c["securityContext"] == {"privileged": False}, (source, c["name"])
                paths = {m["mountPath"] for m in c.get("volumeMounts", [])}
                env = {e["name"]: e.get("value") for e in c["env"]}
                assert env["SHMKEEPER_INTEGRATION"] == "nri", (source, c["name"])
                assert not set(env) & {"SHMKEEPER_RESTART_RUNTIME", "SHMKEEPER_NODE_LABEL", "SHMKEEPER_RUNTIME",
                                       "SHMKEEPER_HOST_CONFIG_DIR"}, (source, env)
                if c["name"] == "install":
                    # Only the copy: the binaries, the preload library and the policy onto the host.
                    assert paths == {"/etc/shmkeeper", "/host/install-root", "/host/etc/shmkeeper"}, (source, paths)
                    assert volumes["install-root"]["hostPath"]["path"] == "/usr/local"
                else:
                    assert paths == {"/host/run"} and c["volumeMounts"][0]["readOnly"], (source, paths)
        pod = daemonset(docs)["spec"]["template"]["spec"]
        agent = next(c for c in pod["containers"] if c["name"] == "agent")
        mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
        assert mounts["/var/run/nri"]["readOnly"] is True, source
        volume = next(v for v in pod["volumes"] if v["name"] == mounts["/var/run/nri"]["name"])
        assert volume["hostPath"] == {"path": "/var/run/nri", "type": "Directory"}, source
        assert agent["securityContext"]["privileged"] is True  # the remount in the runtime's mount namespace
        assert policy(docs)["agent"]["nri"]["socket"] == NRI_SOCKET, source


def test_runtimeclass_profile_keeps_the_handler_and_names_no_nri_socket(helm, dirs):
    for source, docs in renders(helm, dirs, "runtimeclass").items():
        rc = next(d for d in docs if d["kind"] == "RuntimeClass")
        assert rc["handler"] == "shmkeeper", source
        install = daemonset(docs)["spec"]["template"]["spec"]["initContainers"][0]
        assert install["securityContext"]["privileged"] is True, source
        assert {m["mountPath"] for m in install["volumeMounts"]} >= set(RUNTIME_WRITES), source
        assert "SHMKEEPER_INTEGRATION" not in {e["name"] for e in install["env"]}, source
        agent = daemonset(docs)["spec"]["template"]["spec"]["containers"][0]
        assert "/var/run/nri" not in {m["mountPath"] for m in agent["volumeMounts"]}, source
        assert "nri" not in policy(docs)["agent"], source


def test_the_nri_policy_parses_with_the_agents_parser(helm, dirs):
    """The agent reads agent.nri.socket from what the ConfigMap holds, chart and kustomize; the component's
    config.yaml is the base's with that one key (it cannot drift)."""
    for source, docs in renders(helm, dirs, "nri").items():
        f = dirs / "policy.yaml"
        f.write_text(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
        p = run([AGENTD, "--check-config", "--config", f], check=False)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["agent"]["nri"]["socket"] == NRI_SOCKET, (source, p.stdout)
    base = yaml.safe_load((BASE / "config.yaml").read_text())
    component = yaml.safe_load((BASE / "components" / "nri" / "config.yaml").read_text())
    assert component["agent"].pop("nri") == {"socket": NRI_SOCKET}
    assert component == base


def test_the_users_nri_socket_is_kept(helm, tmp_path):
    docs = render_chart(helm, tmp_path, {"policy": {"agent": {"nri": {"socket": "/run/nri/custom.sock",
                                                                       "index": "20"}}}})
    assert policy(docs)["agent"]["nri"] == {"socket": "/run/nri/custom.sock", "index": "20"}


@pytest.mark.parametrize("args,message", [
    (["--set", "runtime.integration=kata"], "at '/runtime/integration': value must be one of 'nri', 'runtimeclass'"),
    (["--set", "agent.reportOnly=true"], "agent.reportOnly needs runtime.integration=runtimeclass"),
])
def test_a_wrong_integration_is_refused(helm, args, message):
    p = run([helm, "template", "shmkeeper", CHART, *args], check=False)
    assert p.returncode != 0 and message in p.stderr, p.stderr
    # Control: the same values with the RuntimeClass profile (and a valid name) render.
    ok = ["--set", "runtime.integration=runtimeclass"] + (args if "reportOnly" in args[1] else [])
    assert run([helm, "template", "shmkeeper", CHART, *ok], check=False).returncode == 0


def test_node_setup_in_nri_mode_copies_and_touches_no_runtime(tmp_path):
    """What the install container runs on a node: the preload library lands where the agent injects it from, the
    containerd config (and a containerd socket beside it) stays as it was, no restart, no label; uninstall has
    nothing to undo. Control: the same node with the RuntimeClass integration gets the handler."""
    host = tmp_path / "host"
    (host / "etc" / "containerd").mkdir(parents=True)
    (host / "run" / "containerd").mkdir(parents=True)
    config = host / "etc" / "containerd" / "config.toml"
    original = "version = 2\n"
    config.write_text(original)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(host / "run" / "containerd" / "containerd.sock"))
    bin_dir, lib_dir = image_dirs(tmp_path / "image")
    env = {"SHMKEEPER_HOST_ROOT": str(host), "SHMKEEPER_SOURCE_BIN_DIR": str(bin_dir),
           "SHMKEEPER_SOURCE_LIB_DIR": str(lib_dir), "SHMKEEPER_POLICY": str(BASE / "components/nri/config.yaml"),
           "SHMKEEPER_RESTART_RUNTIME": "command", "SHMKEEPER_RESTART_COMMAND": f"touch {tmp_path}/restarted",
           "SHMKEEPER_NODE_LABEL": "true", "SHMKEEPER_HOST_PID": str(os.getpid()), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    def node_setup(verb, **extra):
        return subprocess.run(["sh", str(SETUP), verb], env=dict(env, **extra), capture_output=True, text=True,
                              timeout=60)
    try:
        p = node_setup("install", SHMKEEPER_INTEGRATION="nri")
        assert p.returncode == 0, p.stderr
        assert "nri: nothing installed into the runtime" in p.stdout
        lib = host / "usr" / "local" / "lib" / "shmkeeper" / "libshmkeeper-preload.so"
        assert lib.read_bytes() == (BUILD / "plugin" / "libshmkeeper-preload.so").read_bytes()
        assert yaml.safe_load((host / "etc" / "shmkeeper" / "config.yaml").read_text())["agent"]["nri"]["socket"] \
            == NRI_SOCKET
        assert config.read_text() == original and not (tmp_path / "restarted").exists()
        p = node_setup("uninstall", SHMKEEPER_INTEGRATION="nri")
        assert p.returncode == 0 and "nri: nothing registered" in p.stdout, p.stdout + p.stderr
        assert config.read_text() == original and lib.exists()
        p = node_setup("install", SHMKEEPER_INTEGRATION="kata")
        assert p.returncode == 1 and "SHMKEEPER_INTEGRATION must be runtimeclass or nri (got: kata)" in p.stderr
        # Control: the RuntimeClass integration registers the handler (restart left to the test: false).
        p = node_setup("install", SHMKEEPER_RESTART_RUNTIME="false", SHMKEEPER_NODE_LABEL="false")
        assert p.returncode == 0, p.stderr
        assert "shmkeeper-runtime" in config.read_text()
    finally:
        sock.close()
