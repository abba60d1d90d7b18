{{- define "shmkeeper.labels" -}}
app.kubernetes.io/name: shmkeeper
app.kubernetes.io/part-of: shmkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "shmkeeper.selector" -}}
app.kubernetes.io/name: shmkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "shmkeeper.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The policy as the agent reads it; metricsAddress follows metrics.*. */}}
{{- define "shmkeeper.policy" -}}
{{- $agent := merge (dict "metricsAddress" (ternary (printf "0.0.0.0:%v" .Values.metrics.port) "" .Values.metrics.enabled)) .Values.policy.agent -}}
{{- $_ := set $agent "reconcile" .Values.agentOnly -}}
{{- toYaml (merge (dict "agent" $agent) (omit .Values.policy "agent")) -}}
{{- end }}
