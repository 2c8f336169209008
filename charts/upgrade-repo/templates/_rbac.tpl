{{/*
A component's ClusterRole (unless rbac.create is false) and its binding to the component's
ServiceAccount. The rules are controller-gen's, copied into files/ by hack/verify-chart.sh update.
Call with (dict "root" $ "component" "agent" "name" (include "upgrade-repo.agent" $)).
*/}}
{{- define "upgrade-repo.clusterRBAC" -}}
{{- $root := .root }}
{{- $roleName := printf "upgrade-repo-%s" .component }}
{{- if $root.Values.rbac.create }}
{{- $roleName = .name }}
{{- $file := printf "files/%s-role.yaml" .component }}
{{- $role := $root.Files.Get $file | fromYaml }}
{{- if not $role.rules }}
{{- fail (printf "%s holds no rules: run hack/verify-chart.sh update to copy it from manifests/rbac/%s/role.yaml" $file .component) }}
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $roleName }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
rules:
  {{- toYaml $role.rules | nindent 2 }}
---
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $roleName }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
