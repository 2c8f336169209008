{{/*
The chart's name, shortened to the 63 characters a label value may hold.
*/}}
{{- define "upgrade-repo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name every resource starts with: the release name, plus the chart name unless the
release name already contains it.
*/}}
{{- define "upgrade-repo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels shared by every resource.
*/}}
{{- define "upgrade-repo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "upgrade-repo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: upgrade-repo
{{- end }}

{{/*
Selector labels of one component; call with (dict "root" $ "component" "agent").
*/}}
{{- define "upgrade-repo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "upgrade-repo.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The image reference.
*/}}
{{- define "upgrade-repo.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Names of the agent's and the sequencer's resources. */}}
{{- define "upgrade-repo.agent" -}}
{{- printf "%s-agent" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "upgrade-repo.peers" -}}
{{- printf "%s-peers" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "upgrade-repo.localService" -}}
{{- printf "%s-local" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "upgrade-repo.upgradeJob" -}}
{{- printf "%s-upgrade" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{/*
The ServiceAccount of the upgrade Jobs: the chart's own when upgradeJob.serviceAccount.create,
else the one named in upgradeJob.serviceAccount.name (empty: the namespace's default).
*/}}
{{- define "upgrade-repo.upgradeJobServiceAccount" -}}
{{- if .Values.upgradeJob.serviceAccount.create }}
{{- default (include "upgrade-repo.upgradeJob" .) .Values.upgradeJob.serviceAccount.name }}
{{- else }}
{{- .Values.upgradeJob.serviceAccount.name }}
{{- end }}
{{- end }}
{{- define "upgrade-repo.sequencer" -}}
{{- printf "%s-sequencer" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret holding the gossip key.
*/}}
{{- define "upgrade-repo.gossipSecret" -}}
{{- if .Values.gossip.existingSecret }}
{{- .Values.gossip.existingSecret }}
{{- else }}
{{- printf "%s-gossip" (include "upgrade-repo.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The URL of the Service in front of the agents, as seen from inside the cluster.
*/}}
{{- define "upgrade-repo.repoURL" -}}
{{- printf "http://%s.%s.svc:%v" (include "upgrade-repo.fullname" .) .Release.Namespace .Values.service.port }}
{{- end }}

{{/*
GOMEMLIMIT of a container: the explicit value, or the container's memory limit in bytes.
Call with (dict "limit" .Values.agent.goMemLimit "container" "agent").
*/}}
{{- define "upgrade-repo.goMemLimit" -}}
- name: GOMEMLIMIT
{{- if .limit }}
  value: {{ .limit | quote }}
{{- else }}
  valueFrom:
    resourceFieldRef:
      containerName: {{ .container }}
      resource: limits.memory
{{- end }}
{{- end }}
