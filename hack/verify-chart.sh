#!/usr/bin/env bash
# verify-chart.sh [verify|update|tools]: checks the Helm chart and the kustomize manifests.
#   verify (default): helm lint; renders the chart with several value sets and checks what each
#                     must and must not contain; checks that the chart README (helm-docs), the
#                     chart's copies of the generated CRDs and RBAC rules and the rendered
#                     manifests/ are up to date.
#   update:           regenerates all of those.
#   tools:            installs the pinned helm and helm-docs into bin/ and prints helm's path.
# helm and helm-docs are installed from the Go module proxy at pinned versions on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-verify}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELM_DOCS_VERSION=${HELM_DOCS_VERSION:-v1.14.2}
chart=charts/upgrade-repo
bin=$PWD/bin
helm=$bin/helm-$HELM_VERSION
helm_docs=$bin/helm-docs-$HELM_DOCS_VERSION

install_tool() { # install_tool PACKAGE VERSION TARGET
  [ -x "$3" ] && return
  echo "verify-chart: installing $1@$2 (first use compiles it)" >&2
  local tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS=-mod=mod CGO_ENABLED=0 go install "$1@$2"
  mkdir -p "$bin"
  mv "$tmp/$(basename "$1")" "$3"
  rm -rf "$tmp"
}
install_tool helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "$helm"
if [ "$mode" = tools ]; then echo "$helm"; exit 0; fi
install_tool github.com/norwoodj/helm-docs/cmd/helm-docs "$HELM_DOCS_VERSION" "$helm_docs"

fail() { echo "verify-chart: $*" >&2; exit 1; }
# The release the agents serve has no default; renders name a placeholder one.
placeholder_sum=sha512:$(printf '0%.0s' $(seq 128))
iso=(--set release.isoURL=https://releases.example.invalid/release.iso --set "release.isoChecksum=$placeholder_sum")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The generated files the chart ships (controller-gen's CRDs and ClusterRole rules) are copies of
# manifests/, made by `update` and compared byte for byte by `verify`, so they cannot drift. They
# are copies, not symbolic links: helm prints "found symbolic link in path" on every command that
# reads a chart holding links, which is noise for every operator who installs it.
copies() { # copies: prints "PATH-IN-CHART SOURCE" for every copy the chart should hold
  local f c
  for f in manifests/crd/*.yaml; do
    [ -e "$f" ] && echo "crds/$(basename "$f") $f"
  done
  for c in agent sequencer; do
    [ -f "manifests/rbac/$c/role.yaml" ] && echo "files/$c-role.yaml manifests/rbac/$c/role.yaml"
  done
  true
}
sync_copies() {
  rm -rf "$chart/crds" "$chart/files"
  mkdir -p "$chart/crds" "$chart/files"
  local p src
  while read -r p src; do cp "$src" "$chart/$p"; done < <(copies)
}
check_copies() { # check_copies: fails naming each copy that is missing, extra, a link or stale
  local p src f bad=0 want
  want=$(copies)
  while read -r p src; do
    if [ -L "$chart/$p" ] || ! cmp -s "$src" "$chart/$p"; then echo "verify-chart: $chart/$p is not a copy of $src" >&2; bad=1; fi
  done <<<"$want"
  for f in "$chart"/crds/* "$chart"/files/*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    grep -qF "${f#"$chart"/} " <<<"$want" || { echo "verify-chart: $f copies nothing in manifests/" >&2; bad=1; }
  done
  return "$bad"
}

# The kustomize base is the chart rendered with its defaults (agents that follow the UpgradePlans,
# no fixed release ISO), minus Helm's own labels, with the gossip key left to a Secret the user
# creates (a random key cannot live in a static manifest) and the agents' node policy
# (ValidatingAdmissionPolicy, Kubernetes 1.30 and later). Its RBAC is the chart's too: the generated roles hold Roles for namespaces that only the chart's values map to
# real ones (and that may not exist, such as system-upgrade-controller's), so manifests/rbac cannot
# be applied as it is.
render_manifests() { # render_manifests DIR: writes DIR/upgrade-repo.yaml and DIR/kustomization.yaml
  {
    echo "# The upgrade-repo base: the generated CRDs, and the chart rendered with its defaults (with"
    echo "# controller-gen's ClusterRoles and Roles). Written by hack/verify-chart.sh update; do not edit."
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "  - namespace.yaml"
    local f
    for f in manifests/crd/*.yaml; do
      [ -e "$f" ] && echo "  - ${f#manifests/}"
    done
    echo "  - upgrade-repo.yaml"
  } > "$1/kustomization.yaml"
  {
    echo "# Rendered from charts/upgrade-repo with its default values by hack/verify-chart.sh update."
    echo "# Do not edit: change the chart and regenerate. The agents follow the UpgradePlans, as the"
    echo "# chart's agents do; the Secret upgrade-repo-gossip (its entry \"key\") is yours to create."
    "$helm" template upgrade-repo "$chart" --namespace upgrade-repo-system \
      --set gossip.existingSecret=upgrade-repo-gossip \
      --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy |
      grep -v -e '^ *helm.sh/chart:' -e '^ *app.kubernetes.io/managed-by:'
  } > "$1/upgrade-repo.yaml"
}

if [ "$mode" = update ]; then
  sync_copies
  "$helm_docs" --chart-search-root "$chart" --template-files README.md.gotmpl >/dev/null 2>&1 || fail "helm-docs failed"
  render_manifests manifests
  echo "verify-chart: chart README, copies of generated files and manifests/ updated" >&2
  exit 0
fi
[ "$mode" = verify ] || fail "unknown mode $mode (verify, update or tools)"

# 1. The chart's copies of generated files and its README are current.
check_copies || fail "the copies in $chart/crds and $chart/files do not match manifests/: run hack/verify-chart.sh update"
cp -rL "$chart" "$work/chart"
"$helm_docs" --chart-search-root "$work/chart" --template-files README.md.gotmpl >/dev/null 2>&1
diff -u "$chart/README.md" "$work/chart/README.md" >&2 || fail "$chart/README.md is stale: run hack/verify-chart.sh update"
mkdir -p "$work/manifests"
render_manifests "$work/manifests"
for f in kustomization.yaml upgrade-repo.yaml; do
  diff -u "manifests/$f" "$work/manifests/$f" >&2 || fail "manifests/$f is stale: run hack/verify-chart.sh update"
done

# 2. Lint with the defaults and with every feature switched on.
"$helm" lint --strict "$chart" "${iso[@]}" >/dev/null || { "$helm" lint --strict "$chart" "${iso[@]}" >&2; fail "helm lint failed"; }
"$helm" lint --strict "$chart" "${iso[@]}" --set gossip.key=0123456789abcdef --set sequencer.enabled=false \
  --set rbac.create=false >/dev/null || fail "helm lint with a fixed key, no sequencer, no ClusterRoles failed"

# --- Gossip key stability (issue 11, item 4) -------------------------------------------------
# Rendered without a cluster to ask (helm template, GitOps tools), the chart cannot keep a key it
# generates: a new one at every render would split the ring of agents restarted in between. So
# such a render fails unless gossip.key or gossip.existingSecret is given; a given key is used as
# it is, the same at every render. (helm lint reports the failure as INFO and passes.)
if out=$("$helm" template t "$chart" --namespace ns "${iso[@]}" 2>&1); then
  fail "render without a gossip key and without a cluster should have failed"
fi
grep -q 'gossip.key or gossip.existingSecret is required' <<<"$out" ||
  fail "render without a gossip key failed without saying why: $out"
keyed=(--namespace ns "${iso[@]}" --set gossip.key=0123456789abcdef0123456789abcdef --show-only templates/gossip-secret.yaml)
[ "$("$helm" template t "$chart" "${keyed[@]}")" = "$("$helm" template t "$chart" "${keyed[@]}")" ] ||
  fail "the gossip Secret differs between two renders with the same key"
"$helm" template t "$chart" --namespace ns "${iso[@]}" --set gossip.existingSecret=k >/dev/null ||
  fail "render with gossip.existingSecret and without a cluster failed"
# The renders below have no cluster either: they give a key.
iso+=(--set gossip.key=0123456789abcdef0123456789abcdef)
# --- end of gossip key stability --------------------------------------------------------------

# 3. Render value sets and check what each must (and must not) contain.
render() { # render NAME ARGS...: renders into $work/NAME.yaml
  local name=$1; shift
  "$helm" template t "$chart" --namespace ns "${iso[@]}" "$@" > "$work/$name.yaml" || fail "render $name failed"
}
has() { grep -qE -- "$2" "$work/$1.yaml" || fail "render $1: expected a line matching '$2'"; }
hasnt() { ! grep -qE -- "$2" "$work/$1.yaml" || fail "render $1: unexpected line matching '$2'"; }

render defaults
has defaults 'kind: DaemonSet'
has defaults '- --join=t-upgrade-repo-peers\.ns\.svc'
has defaults 'publishNotReadyAddresses: true'
has defaults 'type: Socket'
has defaults 'path: /var/lib/upgrade-repo$'
has defaults 'name: GOMEMLIMIT'
has defaults 'resource: limits.memory'
has defaults 'readOnlyRootFilesystem: true'
has defaults 'kind: Secret'
hasnt defaults 'privileged: true'
hasnt defaults 'allowPrivilegeEscalation: true'
hasnt defaults 'kind: ServiceMonitor'
has defaults "- --iso-checksum=$placeholder_sum"
has defaults 'kind: Deployment'
has defaults '- --leader-elect'
has defaults '- --repo-url=http://t-upgrade-repo\.ns\.svc:80'
has defaults 'kind: ClusterRole$'
# The node-local Service the node Jobs reach their own node's agent through, without DNS.
has defaults 'name: t-upgrade-repo-local$'
has defaults 'internalTrafficPolicy: Local'
has defaults '- --local-service=t-upgrade-repo-local$'
# The sequencer never evicts its own replicas, keeps one through others' drains, spreads them.
has defaults '- --keep-pods=app.kubernetes.io/instance=t,app.kubernetes.io/component=sequencer$'
has defaults 'kind: PodDisruptionBudget'
has defaults 'maxUnavailable: 1$'
has defaults 'podAntiAffinity:'
has defaults 'whenUnsatisfiable: ScheduleAnyway'
hasnt defaults 'key: node-role.kubernetes.io/control-plane'
# The agents tolerate every taint (tainted control planes, witness nodes).
grep -A3 '^ *tolerations:' "$work/defaults.yaml" | grep -q -- '- operator: Exists' || fail "render defaults: the agents do not tolerate every taint"
# The upgrade Jobs' ServiceAccount, bound to cluster-admin.
has defaults '- --job-service-account=t-upgrade-repo-upgrade$'
has defaults 'name: t-upgrade-repo-upgrade$'
has defaults 'name: cluster-admin$'

render origin --set release.isoURL=https://example.org/r.iso --set release.isoChecksum=sha512:ab \
  --set agent.goMemLimit=450MiB --set agent.cacheDir=/data/cache --set log.level=debug
has origin '- --iso-url=https://example.org/r.iso'
has origin '- --iso-checksum=sha512:ab'
has origin 'value: "450MiB"'
has origin 'path: /data/cache$'
has origin 'value: "debug"'

render monitored --set serviceMonitor.enabled=true --set serviceMonitor.labels.release=prom \
  --api-versions monitoring.coreos.com/v1
has monitored 'kind: ServiceMonitor'
has monitored 'release: prom'

# The dashboard and the alert rules: off by default; the dashboard's ConfigMap carries the label
# Grafana's sidecar is set to look for, in the namespace it watches. internal/monitoring's test
# parses both and checks every metric they name against what the code exposes.
hasnt defaults 'kind: PrometheusRule'
hasnt defaults 'grafana_dashboard'
hasnt monitored 'kind: PrometheusRule'
render dashboard --set monitoring.dashboard.enabled=true --set monitoring.dashboard.label=dash \
  --set monitoring.dashboard.labelValue=yes --set monitoring.dashboard.namespace=grafana
has dashboard '^    dash: "yes"$'
has dashboard '^  namespace: grafana$'
has dashboard '"uid": "upgrade-repo"'
render rules --set monitoring.rules.enabled=true --set monitoring.rules.stalledAfter=7m \
  --set sequencer.enabled=false --api-versions monitoring.coreos.com/v1
has rules 'kind: PrometheusRule'
has rules 'changes\(upgrade_repo_agent_iso_held_bytes\{namespace="ns"\}\[7m\]\)'
has rules 'alert: UpgradeRepoAgentNotReporting'
hasnt rules 'alert: UpgradeRepoSequencerNotReporting'

render existing --set gossip.existingSecret=my-key --set sequencer.enabled=false
hasnt existing 'kind: Secret'
has existing 'secretName: my-key'
hasnt existing 'kind: Deployment'
hasnt existing 'kind: PodDisruptionBudget'
hasnt existing 'upgrade-repo-upgrade'

render placed --set sequencer.tolerateControlPlane=true --set sequencer.spreadAcrossNodes=false \
  --set sequencer.podDisruptionBudget.enabled=false --set upgradeJob.clusterRole=my-upgrader
has placed 'key: node-role.kubernetes.io/control-plane'
hasnt placed 'podAntiAffinity:'
hasnt placed 'whenUnsatisfiable'
hasnt placed 'kind: PodDisruptionBudget'
has placed 'name: my-upgrader$'
hasnt placed 'name: cluster-admin$'

render nojobsa --set upgradeJob.serviceAccount.create=false
hasnt nojobsa 'job-service-account'
hasnt nojobsa 'name: t-upgrade-repo-upgrade$'
render ownjobsa --set upgradeJob.serviceAccount.create=false --set upgradeJob.serviceAccount.name=upgrader
has ownjobsa '- --job-service-account=upgrader$'
hasnt ownjobsa 'kind: ClusterRoleBinding.*upgrade'

# Compatibility mode: the sequencer's flags and its Role in the product's namespace.
hasnt defaults 'compat-namespace'
render compat --set compat.enabled=true
has compat '- --compat-namespace=harvester-system$'
has compat '- --cluster-domain=cluster\.local$'
has compat 'name: t-upgrade-repo-sequencer-compat$'
has compat 'namespace: harvester-system$'
has compat '^    - deployments$'

render fixedkey --set gossip.key=0123456789abcdef0123456789abcdef
has fixedkey "key: \"$(printf 0123456789abcdef0123456789abcdef | base64 -w0)\""

# --- RBAC: namespaced permissions in Roles, agents bound to their node (issue 11, item 2) -----
# controller-gen's roles hold the ClusterRole and one Role per namespace its markers name; the
# chart maps those namespaces to the release's, `default`, systemUpgradeController.namespace and
# compat.namespace (templates/_rbac.tpl). The sequencer may write cluster-wide only what drains
# need; every namespaced write is in a Role. The agents' node policy renders where the API serves
# ValidatingAdmissionPolicy v1.
doc() { # doc RENDER KIND NAME [NAMESPACE]: prints that object's document of $work/RENDER.yaml
  awk -v kind="$2" -v name="$3" -v ns="${4:-}" '
    function flush() { if (k == kind && n == name && s == ns) printf "%s", buf; buf = k = n = s = "" }
    /^---/ { flush(); next }
    { buf = buf $0 "\n" }
    /^[a-zA-Z]/ { top = $1 }
    /^kind: / { k = $2 }
    top == "metadata:" && /^  name: / { n = $2 }
    top == "metadata:" && /^  namespace: / { s = $2 }
    END { flush() }' "$work/$1.yaml"
}
resources() { # resources RENDER KIND NAME NAMESPACE: the resources a role's rules name, one a line
  local d; d=$(doc "$@")
  [ -n "$d" ] || fail "render $1: no $2 $3${4:+ in $4}"
  awk '/^ *(- )?[a-zA-Z]+:/ { in_res = ($0 ~ /resources:/); next } in_res && /^ *- / { print $2 }' <<<"$d"
}
grants() { # grants RENDER KIND NAME NAMESPACE RESOURCE...: the role's rules name each resource
  local got; got=$(resources "$1" "$2" "$3" "$4") || exit 1
  local r=$1 k=$2 n=$3 ns=$4; shift 4
  for res in "$@"; do grep -qx -- "$res" <<<"$got" || fail "render $r: $k $n${ns:+ in $ns} does not grant $res"; done
}
denies() { # denies RENDER KIND NAME NAMESPACE RESOURCE...: the role's rules name none of them
  local got; got=$(resources "$1" "$2" "$3" "$4") || exit 1
  local r=$1 k=$2 n=$3 ns=$4; shift 4
  for res in "$@"; do ! grep -qx -- "$res" <<<"$got" || fail "render $r: $k $n${ns:+ in $ns} grants $res"; done
}
roles_in() { # roles_in RENDER: prints "NAMESPACE NAME" of every Role
  awk '/^---/ { if (k == "Role") print s, n; k = n = s = ""; next }
    /^[a-zA-Z]/ { top = $1 } /^kind: / { k = $2 }
    top == "metadata:" && /^  name: / { n = $2 } top == "metadata:" && /^  namespace: / { s = $2 }
    END { if (k == "Role") print s, n }' "$work/$1.yaml" | sort
}
seq_role=t-upgrade-repo-sequencer
grants defaults ClusterRole "$seq_role" "" nodes pods pods/eviction poddisruptionbudgets upgradeplans reponodes versions
denies defaults ClusterRole "$seq_role" "" jobs configmaps services endpointslices leases events plans deployments secrets
grants defaults Role "$seq_role" ns jobs configmaps services endpointslices leases events pods
denies defaults Role "$seq_role" ns plans deployments nodes
grants defaults Role "$seq_role-events" default events
denies defaults Role "$seq_role-events" default jobs configmaps services leases plans
denies defaults ClusterRole t-upgrade-repo-agent "" jobs configmaps services events
[ "$(roles_in defaults)" = "$(printf 'default %s-events\nns %s' "$seq_role" "$seq_role")" ] ||
  fail "render defaults: Roles other than the sequencer's in ns and default: $(roles_in defaults)"
grep -A12 "^kind: RoleBinding" "$work/defaults.yaml" | grep -q "name: $seq_role-events$" || fail "render defaults: no RoleBinding of the events Role"
has defaults '- --suc-namespace=cattle-system$'
hasnt defaults 'leader-election$'
render suc --set systemUpgradeController.enabled=true --set systemUpgradeController.namespace=suc-ns \
  --set compat.enabled=true --set compat.namespace=product
has suc '- --suc-namespace=suc-ns$'
grants suc Role "$seq_role-suc" suc-ns plans
denies suc Role "$seq_role-suc" suc-ns jobs configmaps services deployments events
grants suc Role "$seq_role-compat" product services deployments
denies suc Role "$seq_role-compat" product jobs configmaps plans
[ "$(roles_in suc | cut -d' ' -f1 | tr '\n' ' ')" = "default ns product suc-ns " ] ||
  fail "render suc: Roles in unexpected namespaces: $(roles_in suc)"
# The Roles stay apart when the namespaces they stand for are one.
render samens --set systemUpgradeController.enabled=true --set systemUpgradeController.namespace=ns \
  --set compat.enabled=true --set compat.namespace=ns
[ "$(roles_in samens | tr '\n' ' ')" = "default $seq_role-events ns $seq_role ns $seq_role-compat ns $seq_role-suc " ] ||
  fail "render samens: $(roles_in samens)"
# Without rbac.create, the bindings name controller-gen's roles, applied separately.
render norbac --set rbac.create=false --set systemUpgradeController.enabled=true
hasnt norbac '^kind: (Cluster)?Role$'
[ "$(grep -c '^kind: RoleBinding$' "$work/norbac.yaml")" = 3 ] || fail "render norbac: expected 3 RoleBindings"
[ "$(grep -A3 '^roleRef:' "$work/norbac.yaml" | grep -c 'name: upgrade-repo-sequencer$')" = 4 ] ||
  fail "render norbac: the sequencer's bindings do not all name upgrade-repo-sequencer"
# A Role in a namespace the chart does not map fails the render instead of vanishing.
cp -rL "$chart" "$work/unmapped"
printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: upgrade-repo-sequencer\n  namespace: elsewhere\nrules:\n- apiGroups: [""]\n  resources: [secrets]\n  verbs: [get]\n' \
  >> "$work/unmapped/files/sequencer-role.yaml"
if out=$("$helm" template t "$work/unmapped" "${iso[@]}" --set gossip.key=0123456789abcdef 2>&1); then
  fail "a generated Role in an unmapped namespace rendered"
fi
grep -q 'Role in namespace "elsewhere", which templates/_rbac.tpl' <<<"$out" || fail "unmapped Role: unexpected failure: $out"
# The agents' node policy: matched to the agent's ServiceAccount, comparing the RepoNode with the
# token's node, on create and update of reponodes and their status; absent where the API lacks it.
vap=(--api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy)
hasnt defaults 'kind: ValidatingAdmissionPolicy'
render vap "${vap[@]}"
grep -q '^kind: ValidatingAdmissionPolicyBinding$' "$work/vap.yaml" || fail "render vap: no ValidatingAdmissionPolicyBinding"
policy=$(doc vap ValidatingAdmissionPolicy t-upgrade-repo-agent-own-node)
[ -n "$policy" ] || fail "render vap: no ValidatingAdmissionPolicy t-upgrade-repo-agent-own-node"
for want in 'request.userInfo.username == "system:serviceaccount:ns:t-upgrade-repo-agent"' \
  'resources: \["reponodes", "reponodes/status"\]' 'operations: \["CREATE", "UPDATE"\]' \
  'request.userInfo.extra\["authentication.kubernetes.io/node-name"\]\[0\]' \
  'object.metadata.name == variables.node' 'failurePolicy: Fail'; do
  grep -qE -- "$want" <<<"$policy" || fail "render vap: the policy lacks '$want'"
done
binding=$(doc vap ValidatingAdmissionPolicyBinding t-upgrade-repo-agent-own-node)
grep -q 'policyName: t-upgrade-repo-agent-own-node$' <<<"$binding" && grep -q 'validationActions: \[Deny\]' <<<"$binding" ||
  fail "render vap: the binding does not deny through the policy: $binding"
render novap "${vap[@]}" --set agent.nodeRestriction=false
hasnt novap 'kind: ValidatingAdmissionPolicy'
render noagentvap "${vap[@]}" --set agent.enabled=false
hasnt noagentvap 'kind: ValidatingAdmissionPolicy'
grep -q '^kind: ValidatingAdmissionPolicy$' manifests/upgrade-repo.yaml || fail "manifests/upgrade-repo.yaml lacks the agents' node policy"
# --- end of RBAC --------------------------------------------------------------------------------

# 4. Bad values fail with a clear message instead of rendering something broken.
refuse() { # refuse WANT ARGS...: the render must fail and say WANT
  local want=$1; shift
  if out=$("$helm" template t "$chart" "$@" 2>&1); then fail "render with $* should have failed"; fi
  grep -q -- "$want" <<<"$out" || fail "render with $* failed without saying '$want': $out"
}
refuse 'release.isoURL is required' --set release.isoChecksum=sha512:00
refuse 'release.isoChecksum' --set release.isoURL=http://x/r.iso
refuse 'gossip.key must be 16, 24 or 32' "${iso[@]}" --set gossip.key=short
refuse 'monitoring.coreos.com/v1' "${iso[@]}" --set serviceMonitor.enabled=true
refuse 'monitoring.coreos.com/v1' "${iso[@]}" --set monitoring.rules.enabled=true
refuse 'monitoring.dashboard.label is required' "${iso[@]}" --set monitoring.dashboard.enabled=true --set monitoring.dashboard.label=

# 5. The kustomize base builds, when a kustomize is at hand, and its agents are the chart's
# defaults': they follow the UpgradePlans (no --iso-url), as `helm install` without values gives.
! grep -q -- '--iso-url\|--iso-checksum' manifests/upgrade-repo.yaml ||
  fail "manifests/upgrade-repo.yaml pins the agents to one ISO; the chart's defaults follow the plans"
kubectl=${KUBECTL:-$(command -v kubectl || true)}
[ -n "$kubectl" ] || [ ! -x "$HOME/.cache/kind-offline/bin/kubectl" ] || kubectl=$HOME/.cache/kind-offline/bin/kubectl
if [ -n "$kubectl" ] && "$kubectl" kustomize --help >/dev/null 2>&1; then
  "$kubectl" kustomize manifests > "$work/kustomized.yaml" || fail "kubectl kustomize manifests failed"
  # The chart's defaults, written out by the same kustomize so that both are in one form.
  mkdir -p "$work/chartdefaults"
  "$helm" template upgrade-repo "$chart" --namespace upgrade-repo-system --set gossip.existingSecret=upgrade-repo-gossip \
    "${vap[@]}" > "$work/chartdefaults/chart.yaml" || fail "render of the chart's defaults failed"
  printf 'resources:\n  - chart.yaml\n' > "$work/chartdefaults/kustomization.yaml"
  "$kubectl" kustomize "$work/chartdefaults" > "$work/chartdefaults.yaml" || fail "kubectl kustomize of the chart's defaults failed"
  ds() { # ds FILE: the agent DaemonSet of FILE, without Helm's own labels
    awk '/^---/ { if (d) exit; buf = ""; next } { buf = buf $0 "\n" } /^kind: DaemonSet$/ { d = 1 }
      END { if (d) printf "%s", buf }' "$1" | grep -v -e 'helm.sh/chart:' -e 'app.kubernetes.io/managed-by:'; }
  [ -n "$(ds "$work/kustomized.yaml")" ] || fail "kustomize output lacks the agent DaemonSet"
  diff -u <(ds "$work/chartdefaults.yaml") <(ds "$work/kustomized.yaml") >&2 ||
    fail "the agents of kubectl apply -k manifests differ from the chart's defaults"
fi
echo "verify-chart: chart lints, renders and is up to date" >&2
