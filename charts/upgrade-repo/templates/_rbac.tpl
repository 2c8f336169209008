{{/*
A component's RBAC from controller-gen's output (files/<component>-role.yaml, a link to
manifests/rbac/<component>/role.yaml): its ClusterRole and every Role, unless rbac.create is
false, each bound to the component's ServiceAccount.

controller-gen writes a Role for each namespace named in the markers (`namespace=...`). Those
namespaces stand for the ones the component is given at install, and "upgrade-repo.roleNamespaces"
maps each to where the chart puts its Role and the suffix of the Role's name; a Role whose
namespace the map leaves out (a feature switched off) is not rendered, and one the map does not
know fails the render, so a new marker cannot be dropped unnoticed. Distinct suffixes keep the
Roles apart when two of those namespaces are the same one.
Call with (dict "root" $ "component" "agent" "name" (include "upgrade-repo.agent" $)).
*/}}
{{- define "upgrade-repo.rbac" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $component := .component }}
{{- $generated := printf "upgrade-repo-%s" $component }}
{{- $file := printf "files/%s-role.yaml" $component }}
{{- $targets := include "upgrade-repo.roleNamespaces" $root | fromYaml }}
{{- $clusterRoles := 0 }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get $file) -1 }}
{{- $role := fromYaml $doc }}
{{- if not $role }}{{ continue }}{{ end }}
{{- if not $role.rules }}
{{- fail (printf "%s: a %s without rules: run hack/verify-chart.sh update to link it to manifests/rbac/%s/role.yaml" $file $role.kind $component) }}
{{- end }}
{{- if eq $role.kind "ClusterRole" }}
{{- $clusterRoles = add1 $clusterRoles }}
{{- $roleName := ternary $name $generated $root.Values.rbac.create }}
{{- if $root.Values.rbac.create }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $roleName }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
rules:
  {{- toYaml $role.rules | nindent 2 }}
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $roleName }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- else if eq $role.kind "Role" }}
{{- $marker := $role.metadata.namespace }}
{{- if not (hasKey $targets $marker) }}
{{- fail (printf "%s: a Role in namespace %q, which templates/_rbac.tpl (upgrade-repo.roleNamespaces) maps nowhere" $file $marker) }}
{{- end }}
{{- with index $targets $marker }}
{{- $roleName := ternary (printf "%s%s" $name .suffix) $generated $root.Values.rbac.create }}
{{- if $root.Values.rbac.create }}
---
# controller-gen's Role of namespace {{ $marker }}, in {{ .namespace }}.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $roleName }}
  namespace: {{ .namespace }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
rules:
  {{- toYaml $role.rules | nindent 2 }}
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ printf "%s%s" $name .suffix }}
  namespace: {{ .namespace }}
  labels:
    {{- include "upgrade-repo.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $roleName }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- else }}
{{- fail (printf "%s: unexpected kind %q" $file $role.kind) }}
{{- end }}
{{- end }}
{{- if ne $clusterRoles 1 }}
{{- fail (printf "%s holds %d ClusterRoles, not one: run hack/verify-chart.sh update to link it to manifests/rbac/%s/role.yaml" $file $clusterRoles $component) }}
{{- end }}
{{- end }}

{{/*
Where the Roles controller-gen generates go: the namespace each marker names (the key) stands for
the namespace below, and the Role and its binding are named after the ServiceAccount plus the
suffix. A key without a value is a namespace whose feature is off: no Role there. Keep the keys in
step with the markers' comments in sequencer/reconciler.go and sequencer/compat.go.
  upgrade-repo-system  the release's namespace (the sequencer's --namespace and leader lease)
  default              events about cluster-scoped objects (UpgradePlans): really `default`
  cattle-system        systemUpgradeController.namespace (--suc-namespace)
  harvester-system     compat.namespace (--compat-namespace)
*/}}
{{- define "upgrade-repo.roleNamespaces" -}}
upgrade-repo-system: {namespace: {{ .Release.Namespace | quote }}, suffix: ""}
default: {namespace: default, suffix: "-events"}
{{- if .Values.systemUpgradeController.enabled }}
cattle-system: {namespace: {{ required "systemUpgradeController.namespace is required with systemUpgradeController.enabled" .Values.systemUpgradeController.namespace | quote }}, suffix: "-suc"}
{{- else }}
cattle-system: null
{{- end }}
{{- if .Values.compat.enabled }}
harvester-system: {namespace: {{ required "compat.namespace is required with compat.enabled" .Values.compat.namespace | quote }}, suffix: "-compat"}
{{- else }}
harvester-system: null
{{- end }}
{{- end }}
