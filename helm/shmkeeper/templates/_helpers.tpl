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

{{- define "shmkeeper.namespace" -}}
{{ ternary .Values.namespace.name .Release.Namespace .Values.namespace.create }}
{{- end }}

{{- define "shmkeeper.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The policy as the agent reads it; metricsAddress follows metrics.*. */}}
{{- define "shmkeeper.policy" -}}
{{- $agent := merge (dict "metricsAddress" (ternary (printf "0.0.0.0:%v" .Values.metrics.port) "" .Values.metrics.enabled)) .Values.policy.agent -}}
{{- toYaml (merge (dict "agent" $agent) (omit .Values.policy "agent")) -}}
{{- end }}

{{/* node-setup.sh's settings, shared by the install and uninstall pods. */}}
{{- define "shmkeeper.setupEnv" -}}
- name: SHMKEEPER_RUNTIME
  value: {{ .Values.runtime | quote }}
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
{{- end }}
