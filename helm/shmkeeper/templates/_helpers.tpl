{{- define "shmkeeper.labels" -}}
app.kubernetes.io/name: shmkeeper
app.kubernetes.io/part-of: shmkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The pod labels and selectors: the same as the kustomize base's. */}}
{{- define "shmkeeper.selector" -}}
app.kubernetes.io/name: shmkeeper
app.kubernetes.io/component: agent
{{- end }}

{{/* Every namespaced object goes into the release namespace (helm -n). */}}
{{- define "shmkeeper.namespace" -}}
{{ .Release.Namespace }}
{{- end }}

{{/* The runtime's config directory on the host, by distribution. */}}
{{- define "shmkeeper.configDir" -}}
{{- $dirs := dict "containerd" "/etc/containerd" "k3s" "/var/lib/rancher/k3s/agent/etc/containerd" "rke2" "/var/lib/rancher/rke2/agent/etc/containerd" "microk8s" "/var/snap/microk8s/current/args" "crio" "/etc/crio" -}}
{{- if not (hasKey $dirs .Values.runtime.distribution) -}}
{{- fail (printf "runtime.distribution must be containerd, k3s, rke2, microk8s or crio (got %q)" .Values.runtime.distribution) -}}
{{- end -}}
{{- .Values.runtime.configDir | default (get $dirs .Values.runtime.distribution) -}}
{{- end }}

{{/* The service account token for the node label, install/uninstall only. */}}
{{- define "shmkeeper.tokenVolume" -}}
- name: node-label-token
  projected:
    sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3600}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
{{- end }}

{{- define "shmkeeper.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* agent.metricsAddress: the user's policy.agent.metricsAddress as written
when set, else 0.0.0.0 and metrics.port (or "" with metrics off). */}}
{{- define "shmkeeper.metricsAddress" -}}
{{- $agent := .Values.policy.agent | default dict -}}
{{- if hasKey $agent "metricsAddress" -}}
{{- $agent.metricsAddress -}}
{{- else if .Values.metrics.enabled -}}
{{- printf "0.0.0.0:%v" .Values.metrics.port -}}
{{- end -}}
{{- end }}

{{/* The port the agent serves /metrics on (the pod's metrics port). */}}
{{- define "shmkeeper.metricsPort" -}}
{{- $address := include "shmkeeper.metricsAddress" . -}}
{{- if not $address -}}
{{- fail "policy.agent.metricsAddress is empty while metrics.enabled is true: set metrics.enabled=false to run without the HTTP listener" -}}
{{- end -}}
{{- $port := regexFind "[0-9]+$" $address -}}
{{- if or (not $port) (eq $port "0") -}}
{{- fail (printf "policy.agent.metricsAddress %q needs a fixed port (host:port)" $address) -}}
{{- end -}}
{{- $port -}}
{{- end }}

{{/* The policy as the agent reads it: the user's, with agent.metricsAddress
filled in only when unset, agent.nri.socket the runtime's default NRI socket
under runtime.integration: nri unless set, and leaks.reclaim: off kept a
string. */}}
{{- define "shmkeeper.policy" -}}
{{- $policy := deepCopy (.Values.policy | default dict) -}}
{{- $agent := deepCopy (.Values.policy.agent | default dict) -}}
{{- $_ := set $agent "metricsAddress" (include "shmkeeper.metricsAddress" .) -}}
{{- if include "shmkeeper.nri" . -}}
{{- $nri := deepCopy ($agent.nri | default dict) -}}
{{- if not (hasKey $nri "socket") -}}
{{- $_ := set $nri "socket" "/var/run/nri/nri.sock" -}}
{{- end -}}
{{- $_ := set $agent "nri" $nri -}}
{{- end -}}
{{- $_ := set $policy "agent" $agent -}}
{{- with $policy.leaks -}}
{{- if and (hasKey . "reclaim") (kindIs "bool" .reclaim) (not .reclaim) -}}
{{- $_ := set . "reclaim" "off" -}}
{{- end -}}
{{- end -}}
{{- toYaml $policy -}}
{{- end }}

{{/* The report-only agent's host paths besides /run/shmkeeper: the
runtimes' state directories (runc/crun state, task bundles, sandbox shm
tmpfs), read-only, never a directory that holds an engine's socket. */}}
{{- define "shmkeeper.statePaths" -}}
{{- $run := dict "containerd" "/run/containerd" "k3s" "/run/k3s/containerd" "rke2" "/run/k3s/containerd" "microk8s" "/var/snap/microk8s/common/run/containerd" -}}
{{- if eq .Values.runtime.distribution "crio" -}}
{{- list "/run/runc" "/run/crun" "/run/containers/storage" | toJson -}}
{{- else -}}
{{- $state := get $run .Values.runtime.distribution -}}
{{- list "/run/containerd/runc" (printf "%s/io.containerd.runtime.v2.task" $state) (printf "%s/io.containerd.grpc.v1.cri" $state) | toJson -}}
{{- end -}}
{{- end }}

{{/* The runtime's CRI socket on the host (agent.mountCriSocket). */}}
{{- define "shmkeeper.criSocketPath" -}}
{{- $socks := dict "containerd" "/run/containerd/containerd.sock" "k3s" "/run/k3s/containerd/containerd.sock" "rke2" "/run/k3s/containerd/containerd.sock" "microk8s" "/var/snap/microk8s/common/run/containerd.sock" "crio" "/run/crio/crio.sock" -}}
{{- if eq .Values.runtime.distribution "crio" -}}
{{- get $socks "crio" -}}
{{- else -}}
{{- .Values.runtime.containerdSocket | default (get $socks .Values.runtime.distribution) -}}
{{- end -}}
{{- end }}

{{/* "true" under runtime.integration: nri (the agent is the runtime's NRI
plugin: nothing installed into the runtime), "" under runtimeclass. The
report-only agent cannot be the plugin (it remounts pods' /dev/shm in the
runtime's mount namespace: privileged). */}}
{{- define "shmkeeper.nri" -}}
{{- if eq .Values.runtime.integration "nri" -}}
{{- if and .Values.agent.reportOnly (not .Values.agentOnly) -}}
{{- fail "agent.reportOnly needs runtime.integration=runtimeclass: the NRI plugin remounts pods' /dev/shm in the runtime's mount namespace, which needs a privileged agent" -}}
{{- end -}}
true
{{- end -}}
{{- end }}

{{/* node-setup.sh's settings, shared by the install and uninstall pods.
Under nri only the copy (install) and nothing to undo (uninstall). */}}
{{- define "shmkeeper.setupEnv" -}}
{{- if include "shmkeeper.nri" . }}
- name: SHMKEEPER_INTEGRATION
  value: nri
- name: SHMKEEPER_INSTALL_ROOT
  value: {{ .Values.installRoot | quote }}
{{- if not .uninstall }}
- name: SHMKEEPER_HOST_INSTALL_DIR
  value: /host/install-root
{{- end }}
{{- else }}
- name: SHMKEEPER_RUNTIME
  value: {{ .Values.runtime.distribution | quote }}
- name: SHMKEEPER_INSTALL_ROOT
  value: {{ .Values.installRoot | quote }}
{{- if not .uninstall }}
- name: SHMKEEPER_SET_AS_DEFAULT
  value: {{ toString .Values.setAsDefault | quote }}
{{- end }}
- name: SHMKEEPER_AGENT_ONLY
  value: {{ toString .Values.agentOnly | quote }}
- name: SHMKEEPER_RESTART_RUNTIME
  value: {{ toString .Values.restartRuntime | quote }}
- name: SHMKEEPER_RESTART_COMMAND
  value: {{ .Values.restartCommand | quote }}
- name: SHMKEEPER_NODE_LABEL
  value: {{ toString .Values.nodeLabel.enabled | quote }}
{{- if not .uninstall }}
- name: SHMKEEPER_HOST_INSTALL_DIR
  value: /host/install-root
{{- end }}
- name: SHMKEEPER_HOST_CONFIG_DIR
  value: /host/runtime-config
{{- with .Values.runtime.containerdConfig }}
- name: SHMKEEPER_CONTAINERD_CONFIG
  value: {{ . | quote }}
{{- end }}
{{- with .Values.runtime.containerdSocket }}
- name: SHMKEEPER_CONTAINERD_SOCKET
  value: {{ . | quote }}
{{- end }}
- name: NODE_NAME
  valueFrom:
    fieldRef: {fieldPath: spec.nodeName}
{{- end }}
{{- end }}

{{/* The install/uninstall containers' host mounts (least privilege: only
what node-setup.sh reads or writes). */}}
{{- define "shmkeeper.setupMounts" -}}
{{- if include "shmkeeper.nri" . }}
{{- if .uninstall }}
- {name: host-run, mountPath: /host/run, readOnly: true}
{{- else }}
- {name: install-root, mountPath: /host/install-root}
- {name: host-policy, mountPath: /host/etc/shmkeeper}
{{- end }}
{{- else }}
- {name: host-run, mountPath: /host/run, readOnly: true}
- {name: runtime-config, mountPath: /host/runtime-config}
{{- if not .uninstall }}
- {name: install-root, mountPath: /host/install-root}
- {name: host-policy, mountPath: /host/etc/shmkeeper}
{{- end }}
{{- if eq .Values.runtime.distribution "microk8s" }}
- {name: microk8s-run, mountPath: /host/var/snap/microk8s/common/run, readOnly: true}
{{- end }}
{{- if eq .Values.runtime.distribution "crio" }}
- {name: crio-hooks, mountPath: /host/usr/share/containers/oci/hooks.d}
- {name: host-usr-bin, mountPath: /host/usr/bin, readOnly: true}
{{- end }}
- {name: node-label-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
{{- end }}
{{- end }}

{{- define "shmkeeper.setupVolumes" -}}
{{- if include "shmkeeper.nri" . }}
- {name: host-run, hostPath: {path: /run, type: Directory}}  {{- /* the agent's (install: none) */}}
{{- if not .uninstall }}
- {name: install-root, hostPath: {path: {{ .Values.installRoot }}, type: DirectoryOrCreate}}
- {name: host-policy, hostPath: {path: /etc/shmkeeper, type: DirectoryOrCreate}}
{{- end }}
{{- else }}
- {name: host-run, hostPath: {path: /run, type: Directory}}
- {name: runtime-config, hostPath: {path: {{ include "shmkeeper.configDir" . }}, type: Directory}}
{{- if not .uninstall }}
- {name: install-root, hostPath: {path: {{ .Values.installRoot }}, type: DirectoryOrCreate}}
- {name: host-policy, hostPath: {path: /etc/shmkeeper, type: DirectoryOrCreate}}
{{- end }}
{{- if eq .Values.runtime.distribution "microk8s" }}
- {name: microk8s-run, hostPath: {path: /var/snap/microk8s/common/run, type: Directory}}
{{- end }}
{{- if eq .Values.runtime.distribution "crio" }}
- {name: crio-hooks, hostPath: {path: /usr/share/containers/oci/hooks.d, type: DirectoryOrCreate}}
- {name: host-usr-bin, hostPath: {path: /usr/bin, type: Directory}}
{{- end }}
{{ include "shmkeeper.tokenVolume" . }}
{{- end }}
{{- end }}
