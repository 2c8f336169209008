#!/usr/bin/env bash
# e2e.sh: the end-to-end test on a kind cluster (`make e2e`).
#   1. creates the kind cluster, or reuses it when it exists (node image from KIND_NODE_IMAGE);
#   2. builds the project image and the tests' images (origin, test upgrade image) FROM scratch and
#      `kind load`s them into every node;
#   3. on a reused cluster, removes what a previous run left;
#   4. builds the release ISO with `upgrade-repo release pack` and puts it on one node only;
#   5. installs the Helm chart (helm at the pinned version, installed into bin/ on first use);
#   6. runs the Go tests of e2e/ against the cluster;
#   on failure, dumps pod logs, events, and the RepoNodes, Versions and UpgradePlans; deletes the
#   cluster unless E2E_KEEP=1.
# env: KIND_NODE_IMAGE, E2E_CLUSTER (upgrade-repo-e2e), E2E_WORKERS (2), E2E_KEEP, E2E_RUN (a
#      go test -run pattern), E2E_TIMEOUT (go test timeout, 25m).
# kind is taken from PATH, else from ~/.cache/kind-offline/bin (../shared/E2E.md); kubectl from
# there first, as it matches the offline node image.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
cluster=${E2E_CLUSTER:-upgrade-repo-e2e}
workers=${E2E_WORKERS:-2}
namespace=upgrade-repo-system
release=upgrade-repo
artifacts=$root/e2e/_artifacts
kubeconfig=$artifacts/kubeconfig
version=e2e-$(git describe --tags --always --dirty 2>/dev/null || echo dev)
image=upgrade-repo:e2e
test_image=upgrade-repo-e2e-testimage:e2e
upgrade_image=upgrade-repo-e2e-upgrade:e2e
offline_bin=${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline/bin
log() { echo "[e2e $(date +%T) +$(( $(date +%s) - start ))s] $*" >&2; }

for tool in kind kubectl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    [ -x "$offline_bin/$tool" ] || { log "$tool is neither on PATH nor in $offline_bin"; exit 1; }
    export PATH=$PATH:$offline_bin
  fi
done
# The kubectl built with the offline node image matches its API server; prefer it when present.
kubectl_bin=$(command -v kubectl)
[ -x "$offline_bin/kubectl" ] && kubectl_bin=$offline_bin/kubectl
kubectl() { "$kubectl_bin" "$@"; }
docker info >/dev/null 2>&1 || { log "no docker engine answers (start one, e.g. ../shared/tools/kind-offline.sh docker)"; exit 1; }
mkdir -p "$artifacts"
export KUBECONFIG=$kubeconfig

# retry N CMD...: runs CMD until it succeeds, at most N times, 5 s apart; the kind control plane
# may drop calls for a moment under load.
retry() {
  local n=$1 i; shift
  for ((i = 1; ; i++)); do
    "$@" && return 0
    [ "$i" -ge "$n" ] && return 1
    log "retrying ($i/$n): $*"
    sleep 5
  done
}

dump() {
  log "collecting state into $artifacts"
  local d=$artifacts/dump
  rm -rf "$d"
  mkdir -p "$d"
  kubectl get nodes -o wide > "$d/nodes.txt" 2>&1 || true
  kubectl get pods -A -o wide > "$d/pods.txt" 2>&1 || true
  kubectl get events -A --sort-by=.lastTimestamp > "$d/events.txt" 2>&1 || true
  kubectl -n "$namespace" describe pods > "$d/describe-pods.txt" 2>&1 || true
  local r
  for r in upgradeplans versions reponodes; do
    kubectl get "$r.management.harvesterhci.io" -o yaml > "$d/$r.yaml" 2>&1 || true
  done
  local p
  for p in $(kubectl -n "$namespace" get pods -o name 2>/dev/null); do
    kubectl -n "$namespace" logs "$p" --all-containers --timestamps > "$d/logs-${p#pod/}.txt" 2>&1 || true
    kubectl -n "$namespace" logs "$p" --all-containers --timestamps --previous > "$d/logs-${p#pod/}-previous.txt" 2>/dev/null || true
  done
  echo "----- pods" >&2; cat "$d/pods.txt" >&2
  echo "----- events in $namespace (last 40)" >&2; grep -E "^($namespace|NAMESPACE) " "$d/events.txt" | tail -40 >&2 || true
  echo "----- upgradeplans" >&2; cat "$d/upgradeplans.yaml" >&2
  echo "----- reponodes" >&2; cat "$d/reponodes.yaml" >&2
  for f in "$d"/logs-*.txt; do
    [ -s "$f" ] || continue
    echo "----- $(basename "$f") (last 40 lines)" >&2; tail -40 "$f" >&2
  done
}

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then dump || true; fi
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    log "keeping cluster $cluster (KUBECONFIG=$kubeconfig)"
  else
    log "deleting cluster $cluster"
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  fi
  if [ "$rc" -eq 0 ]; then log "e2e passed in $(( $(date +%s) - start ))s"; else log "e2e FAILED after $(( $(date +%s) - start ))s"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# 1. The cluster.
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "reusing cluster $cluster"
  kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null
else
  config=$artifacts/kind-config.yaml
  { echo 'kind: Cluster'; echo 'apiVersion: kind.x-k8s.io/v1alpha4'; echo 'nodes:'; echo '- role: control-plane'
    for _ in $(seq 1 "$workers"); do echo '- role: worker'; done; } > "$config"
  node_image=()
  [ -n "${KIND_NODE_IMAGE:-}" ] && node_image=(--image "$KIND_NODE_IMAGE")
  log "creating cluster $cluster (1 control plane, $workers workers${KIND_NODE_IMAGE:+, $KIND_NODE_IMAGE})"
  if ! kind create cluster --name "$cluster" "${node_image[@]}" --config "$config" --kubeconfig "$kubeconfig" --wait 5m; then
    log "cluster creation failed; one more attempt from scratch"
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    kind create cluster --name "$cluster" "${node_image[@]}" --config "$config" --kubeconfig "$kubeconfig" --wait 5m
  fi
fi
retry 30 kubectl wait --for=condition=Ready nodes --all --timeout=60s >/dev/null
retry 30 kubectl -n kube-system wait --for=condition=Ready pods --all --timeout=60s >/dev/null
log "cluster ready: $(kubectl get nodes --no-headers | wc -l) nodes"

# 2. The image, into every node's containerd.
VERSION=$version bash hack/image.sh "$image"
# The tests' own image (e2e/testimage: the in-cluster origin, the test upgrade image), FROM scratch.
ctx=$(mktemp -d)
(cd e2e && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/testimage" ./testimage)
printf 'FROM scratch\nCOPY testimage /testimage\nENTRYPOINT ["/testimage"]\n' > "$ctx/Dockerfile"
builder=()
docker buildx version >/dev/null 2>&1 || builder=(env DOCKER_BUILDKIT=0)
"${builder[@]}" docker build -q -t "$test_image" "$ctx" > "$artifacts/testimage-build.log" 2>&1 || { log "docker build of $test_image failed: see $artifacts/testimage-build.log"; exit 1; }
# The test upgrade image: the same program, run as `testimage upgrade` by the sequencer's Jobs,
# which give it no arguments.
printf 'FROM scratch\nCOPY testimage /testimage\nENTRYPOINT ["/testimage", "upgrade"]\n' > "$ctx/Dockerfile"
"${builder[@]}" docker build -q -t "$upgrade_image" "$ctx" >> "$artifacts/testimage-build.log" 2>&1 || { log "docker build of $upgrade_image failed: see $artifacts/testimage-build.log"; exit 1; }
rm -rf "$ctx"
retry 3 kind load docker-image "$image" "$test_image" "$upgrade_image" --name "$cluster" >/dev/null
log "images $image ($version), $test_image and $upgrade_image loaded"

# 3. A clean slate on a reused cluster: no release of the chart, none of its objects, no node
# cache, none of the release's images in the nodes' containerd.
helm=$(bash hack/verify-chart.sh tools)
# helm notes each link it follows into manifests/ (the chart's CRDs and roles) on stderr.
helmq() { "$helm" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
if "$helm" status "$release" -n "$namespace" >/dev/null 2>&1; then
  log "removing the previous installation"
  "$helm" uninstall "$release" -n "$namespace" --wait --timeout 3m >/dev/null || true
fi
kubectl delete namespace "$namespace" --ignore-not-found --wait --timeout=3m >/dev/null
for r in upgradeplans versions reponodes; do
  kubectl delete "$r.management.harvesterhci.io" --all --ignore-not-found >/dev/null 2>&1 || true
done
# An upgrade cut short may have left a node cordoned.
retry 3 kubectl uncordon $(kind get nodes --name "$cluster") >/dev/null

# 4. The release ISO, built by `release pack` from e2e/testdata/release.yaml, placed into the agent
# cache of the seed node only. The agents are pointed at an origin that does not answer until a
# test deploys it: the other nodes get the ISO from their peers.
# The same build as hack/image.sh's, so it comes from the build cache.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$artifacts/upgrade-repo" ./cmd/upgrade-repo
rel=$artifacts/release
rm -rf "$rel"
mkdir -p "$rel"
"$artifacts/upgrade-repo" release pack --spec e2e/testdata/release.yaml --out "$rel/release.iso" --tree "$rel/tree" -o json > "$rel/release.json.tmp"
mv "$rel/release.json.tmp" "$rel/release.json"
sum=$(sha512sum "$rel/release.iso" | cut -d' ' -f1)
refs=$(cat "$rel"/tree/bundle/*/images-lists/*.txt "$rel"/tree/bundle/*/images/*.txt 2>/dev/null | grep -v '^#' | sort -u || true)
cache=/var/lib/upgrade-repo-e2e/agent
seed=""
for node in $(kind get nodes --name "$cluster"); do
  docker exec "$node" rm -rf /var/lib/upgrade-repo-e2e
  # shellcheck disable=SC2086 # one argument per reference
  docker exec "$node" ctr -n k8s.io images rm $refs >/dev/null 2>&1 || true
  case $node in *control-plane*) [ -z "$seed" ] && seed=$node;; esac
done
[ -n "$seed" ] || seed=$(kind get nodes --name "$cluster" | head -1)
docker exec "$seed" mkdir -p "$cache"
docker cp "$rel/release.iso" "$seed:$cache/$sum.iso"
log "release ISO ($(stat -c %s "$rel/release.iso") bytes, sha512 ${sum:0:16}...) placed on $seed only"

# 5. The chart. The Service is a NodePort with the Local policy, so each node's port answers from
# that node's own agent: the tests reach every agent through the Service from the host.
retry 3 helmq upgrade --install "$release" charts/upgrade-repo --namespace "$namespace" --create-namespace \
  --set image.repository="${image%%:*}" --set image.tag="${image##*:}" --set image.pullPolicy=Never \
  --set release.isoURL="http://e2e-origin.$namespace.svc.cluster.local/release.iso" \
  --set release.isoChecksum="sha512:$sum" --set agent.cacheDir="$cache" \
  --set service.type=NodePort --set service.externalTrafficPolicy=Local \
  --set log.level=debug >/dev/null
log "chart installed as $release in $namespace"

# 6. The tests.
run=()
[ -n "${E2E_RUN:-}" ] && run=(-run "$E2E_RUN")
log "running the e2e tests"
(cd e2e && E2E_KUBECONFIG=$kubeconfig E2E_CLUSTER=$cluster E2E_NAMESPACE=$namespace E2E_RELEASE=$release \
  E2E_IMAGE=$image E2E_TEST_IMAGE=$test_image E2E_UPGRADE_IMAGE=$upgrade_image E2E_VERSION=$version E2E_ARTIFACTS=$artifacts \
  E2E_RELEASE_DIR=$rel E2E_ISO_CHECKSUM=sha512:$sum E2E_SEED_NODES=$seed \
  go test -count=1 -v -timeout "${E2E_TIMEOUT:-25m}" "${run[@]}" ./... 2>&1 | tee "$artifacts/go-test.log")
