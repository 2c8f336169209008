#!/usr/bin/env bash
# e2e.sh [run|build]: the end-to-end test on a kind cluster (`make e2e`).
#   build: only step 2 (images and release ISO into e2e/_artifacts), for hack/e2e-matrix.sh.
#   run (default):
#   1. creates the kind cluster of the formation E2E_FORMATION, or reuses it when it exists with
#      that formation (node image from KIND_NODE_IMAGE), and gives the nodes their roles;
#   2. builds the project image and the tests' images (origin, test upgrade image) FROM scratch and
#      the release ISO with `upgrade-repo release pack` (skipped with E2E_PREBUILT=1: the last
#      build's, described by e2e/_artifacts/build.env), and `kind load`s the images into every node;
#   3. on a reused cluster, removes what a previous run left;
#   4. puts the release ISO on one node only (the kind control plane);
#   5. installs the Helm chart (helm at the pinned version, installed into bin/ on first use);
#   6. runs the Go tests of e2e/ against the cluster, with a watcher that starts a node container
#      again if it stays stopped after its upgrade step rebooted it;
#   on failure, dumps pod logs, events, and the RepoNodes, Versions and UpgradePlans; deletes the
#   cluster unless E2E_KEEP=1.
#
# Formations (E2E_FORMATION, default four). Management nodes beyond the kind control plane are kind
# workers with the labels Harvester's management nodes carry (control-plane, etcd and master set to
# "true", no taint); the kind control plane keeps kind's NoSchedule taint (removed by kind when it
# is the only node). A witness node is a worker labelled etcd=true and harvesterhci.io/witness=true,
# tainted node-role.kubernetes.io/etcd=true:NoExecute.
#   single   the kind control plane alone
#   two      the kind control plane and one worker
#   three    three management nodes (the control plane and two management workers)
#   witness  two management nodes and a witness node
#   four     three management nodes and one worker
#   kubeadm  a real Kubernetes upgrade: the kind control plane and two workers, started from
#            E2E_KUBEADM_FROM_IMAGE (local/kind-node:v1.33.13) and upgraded by an UpgradePlan with
#            the kubeadm upgrade image (Dockerfile.kubeadm) to the release that
#            hack/kubeadm-release.sh packs from E2E_KUBEADM_WORK (the target version's
#            ../shared/tools/kind-offline.sh WORK, ~/.cache/kind-offline: v1.34.4); runs TestKubeadmUpgrade
#   kubeadm-ha  the same upgrade on three real control planes (each with its etcd member, behind
#            kind's load balancer) and a worker, every node schedulable, through the faults of
#            TestKubeadmUpgrade's HA part (a control plane restarted in its kubelet swap, an etcd
#            member paused before a control plane's turn, the sequencer's leader deleted and a
#            control plane's agent killed during their steps, a worker stopped for good)
#
# env: KIND_NODE_IMAGE, E2E_FORMATION (four), E2E_CLUSTER (upgrade-repo-e2e), E2E_KEEP,
#      E2E_FRESH (1: delete an existing cluster first), E2E_PREBUILT, E2E_RUN (a go test -run
#      pattern), E2E_TIMEOUT (go test timeout, 60m), E2E_REBOOT (1: the test upgrade image reboots
#      each node after its work; 0: it does not), E2E_STEP_REPO (require: the test upgrade image
#      must read the release's metadata from the repo the sequencer gives it; try; skip),
#      E2E_KUBEADM_FROM_IMAGE and E2E_KUBEADM_WORK (formation kubeadm), E2E_IMAGE_GC (1: the
#      kubelets' image garbage collection thresholds just above the host disk's usage, for
#      TestPinsHoldAgainstImageGC; see below) and E2E_IMAGE_GC_MARGIN (percent above it, 4);
#      E2E_ROLLBACK (1, formation kubeadm on patch versions of one minor: TestKubeadmRollback and
#      TestKubeadmBadRelease, with E2E_ROLLBACK_PREVIOUS_DIR and E2E_ROLLBACK_PREVIOUS_CHECKSUM, the
#      release of the version the cluster starts from; the release built to fail is packed here);
#      E2E_INSTALL (chart: the chart from charts/ and the images built here; bundle: the images,
#      chart and CLI of `make dist`'s bundle, installed as the README says).
# kind is taken from PATH, else from ~/.cache/kind-offline/bin (../shared/E2E.md); kubectl from
# there first, as it matches the offline node image.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=${1:-run}
start=$(date +%s)
formation=${E2E_FORMATION:-four}
cluster=${E2E_CLUSTER:-upgrade-repo-e2e}
namespace=upgrade-repo-system
release=upgrade-repo
artifacts=$root/e2e/_artifacts
kubeconfig=$artifacts/kubeconfig
image=upgrade-repo:e2e
test_image=upgrade-repo-e2e-testimage:e2e
upgrade_image=upgrade-repo-e2e-upgrade:e2e
# Formation kubeadm: the kubeadm upgrade image, the node image the cluster starts from and the
# target version's artifacts (../shared/E2E.md, "Two Kubernetes versions").
kubeadm_image=upgrade-repo-kubeadm:e2e
kubeadm_from_image=${E2E_KUBEADM_FROM_IMAGE:-local/kind-node:v1.33.13}
kubeadm_work=${E2E_KUBEADM_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline}
# The product's script steps (bash, curl, yq, jq, zstdcat, ctr) for TestCompatScriptSteps: built
# and loaded only when the tests to run include it (the whole suite, or an E2E_RUN naming it).
script_image=upgrade-repo-e2e-scripts:e2e
# The release's runnable image (e2e/mirror_test.go names it too): part of the release ISO, never
# loaded into the nodes, so a node gets it from the preload or through the mirror.
release_check_image=docker.io/rancher/harvester-release-check:v1.5.2
# Formations kubeadm and kubeadm-ha run the real upgrade alone: the other tests assume the
# synthetic release.
kubeadm_formation=0
case $formation in kubeadm|kubeadm-ha) kubeadm_formation=1 ;; esac
[ "$kubeadm_formation" = 1 ] && [ -z "${E2E_RUN:-}" ] && E2E_RUN='^TestKubeadmUpgrade$'
compat=0
case ${E2E_RUN:-} in ''|*Compat*) compat=1 ;; esac
reboot=${E2E_REBOOT:-1}
step_repo=${E2E_STEP_REPO:-require}
offline_bin=${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline/bin
log() { echo "[e2e${formation:+ $formation} $(date +%T) +$(( $(date +%s) - start ))s] $*" >&2; }

# roles FORMATION: one line per node after the kind control plane: "management", "witness" or
# "worker"; fails for an unknown formation.
roles() {
  case $1 in
    single) ;;
    two) echo worker ;;
    three) printf '%s\n' management management ;;
    witness) printf '%s\n' management witness ;;
    four) printf '%s\n' management management worker ;;
    kubeadm) printf '%s\n' worker worker ;;
    kubeadm-ha) printf '%s\n' control-plane control-plane worker ;;
    *) return 1 ;;
  esac
}
case $mode in
  run) roles "$formation" >/dev/null || { log "unknown E2E_FORMATION=$formation (single, two, three, witness, four, kubeadm, kubeadm-ha)"; exit 2; } ;;
  build) formation="" ;;
  *) log "unknown mode $mode (run or build)"; exit 2 ;;
esac

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

# build: the images and the release ISO, described in $artifacts/build.env for later runs.
build() {
  local version
  version=e2e-$(git describe --tags --always --dirty 2>/dev/null || echo dev)
  VERSION=$version bash hack/image.sh "$image"
  # The tests' own image (e2e/testimage: the in-cluster origin, the test upgrade image), FROM scratch.
  local ctx builder=()
  ctx=$(mktemp -d)
  (cd e2e && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/testimage" ./testimage)
  printf 'FROM scratch\nCOPY testimage /testimage\nENTRYPOINT ["/testimage"]\n' > "$ctx/Dockerfile"
  docker buildx version >/dev/null 2>&1 || builder=(env DOCKER_BUILDKIT=0)
  "${builder[@]}" docker build -q -t "$test_image" "$ctx" > "$artifacts/testimage-build.log" 2>&1 || { log "docker build of $test_image failed: see $artifacts/testimage-build.log"; exit 1; }
  # The test upgrade image: the same program, run as `testimage upgrade` by the sequencer's Jobs,
  # which give it no arguments.
  local reboot_flag=true
  [ "$reboot" = 1 ] || reboot_flag=false
  printf 'FROM scratch\nCOPY testimage /testimage\nENTRYPOINT ["/testimage", "upgrade", "--repo=%s", "--reboot=%s"]\n' "$step_repo" "$reboot_flag" > "$ctx/Dockerfile"
  "${builder[@]}" docker build -q -t "$upgrade_image" "$ctx" >> "$artifacts/testimage-build.log" 2>&1 || { log "docker build of $upgrade_image failed: see $artifacts/testimage-build.log"; exit 1; }
  # The release's runnable image: the same program under another path (so its layer is its own,
  # not the test image's), which starts, prints and exits. It joins the release ISO's images, so
  # that a pod of the release can be started from it with no registry (the mirror test).
  printf 'FROM scratch\nCOPY testimage /bin/release-check\nENTRYPOINT ["/bin/release-check", "hello"]\n' > "$ctx/Dockerfile"
  "${builder[@]}" docker build -q -t "$release_check_image" "$ctx" >> "$artifacts/testimage-build.log" 2>&1 || { log "docker build of $release_check_image failed: see $artifacts/testimage-build.log"; exit 1; }
  docker save -o "$ctx/release-check.tar" "$release_check_image"
  bash hack/e2e-scriptimage.sh "$script_image" > "$artifacts/scriptimage-build.log" 2>&1 ||
    { log "building $script_image failed: see $artifacts/scriptimage-build.log"; exit 1; }
  # The release ISO, built by `release pack` from e2e/testdata/release.yaml; the same build as
  # hack/image.sh's, so it comes from the build cache.
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$artifacts/upgrade-repo" ./cmd/upgrade-repo
  local rel=$artifacts/release
  rm -rf "$rel"
  mkdir -p "$rel"
  "$artifacts/upgrade-repo" release pack --spec e2e/testdata/release.yaml --tarball "$ctx/release-check.tar" \
    --out "$rel/release.iso" --tree "$rel/tree" -o json > "$rel/release.json.tmp"
  rm -rf "$ctx"
  mv "$rel/release.json.tmp" "$rel/release.json"
  {
    echo "version=$version"
    echo "sum=$(sha512sum "$rel/release.iso" | cut -d' ' -f1)"
    echo "reboot=$reboot"
    echo "step_repo=$step_repo"
  } > "$artifacts/build.env"
  log "built $image ($version), $test_image, $upgrade_image (reboot=$reboot, repo=$step_repo) and the release ISO"
}

# build_kubeadm: the kubeadm upgrade image and the release ISO of the target version's
# artifacts (hack/kubeadm-release.sh), into $artifacts/kubeadm-release.
build_kubeadm() {
  local v=${version:-e2e-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
  DOCKERFILE=Dockerfile.kubeadm VERSION=$v bash hack/image.sh "$kubeadm_image"
  UPGRADE_REPO=$artifacts/upgrade-repo K8S_WORK=$kubeadm_work bash hack/kubeadm-release.sh "$artifacts/kubeadm-release"
  log "built $kubeadm_image and the kubeadm release ISO from $kubeadm_work"
}

if [ "$mode" = build ]; then
  build
  [ "${E2E_BUILD_KUBEADM:-0}" = 1 ] && build_kubeadm
  exit 0
fi

watcher=""
dump() {
  log "collecting state into $artifacts"
  local d=$artifacts/dump
  rm -rf "$d"
  mkdir -p "$d"
  kubectl get nodes -o wide --show-labels > "$d/nodes.txt" 2>&1 || true
  kubectl get pods -A -o wide > "$d/pods.txt" 2>&1 || true
  kubectl get jobs -A -o wide > "$d/jobs.txt" 2>&1 || true
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
  local n
  for n in $(kind get nodes --name "$cluster" 2>/dev/null); do
    docker inspect -f '{{.Name}} running={{.State.Running}} restarts={{.RestartCount}} started={{.State.StartedAt}} ip={{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$n" >> "$d/node-containers.txt" 2>&1 || true
    docker exec "$n" journalctl -u kubelet --no-pager -n 300 > "$d/kubelet-$n.txt" 2>&1 || true
  done
  echo "----- nodes" >&2; cat "$d/nodes.txt" "$d/node-containers.txt" >&2
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
  if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; fi
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

# 1. The cluster of the formation. Every node carries upgrade-repo-e2e/formation, so a cluster of
# another formation is not reused; the nodes beyond the control plane carry upgrade-repo-e2e/role.
mapfile -t node_roles < <(roles "$formation")
want_nodes=$(( ${#node_roles[@]} + 1 ))
if [ "${E2E_FRESH:-0}" = 1 ] && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "deleting the existing cluster $cluster (E2E_FRESH=1)"
  kind delete cluster --name "$cluster" >/dev/null 2>&1
fi
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null
  have=$(retry 6 kubectl get nodes -l "upgrade-repo-e2e/formation=$formation" -o name | wc -l)
  if [ "$have" -ne "$want_nodes" ] || [ "$(kind get nodes --name "$cluster" | wc -l)" -ne "$want_nodes" ]; then
    log "cluster $cluster is not of formation $formation: deleting it"
    kind delete cluster --name "$cluster" >/dev/null 2>&1
  else
    log "reusing cluster $cluster"
  fi
fi
created=0
# registry_table IMAGE: the TOML table of the CRI registry configuration in IMAGE's containerd
# config, which kind's containerdConfigPatches merge into. It depends on the file's config version,
# not on the daemon: a version 2 file (containerd 1.6 and 1.7 read only that; kind v0.30's base
# image and ../shared/tools/kind-offline.sh write it for containerd 2.1 too) names the v2 CRI
# plugin, and containerd 2.x moves that table to its CRI images plugin when it migrates the file
# (plugins/cri/images configMigration); a version 3 file is read as it is, by containerd 2.x
# alone, whose v2 CRI plugin has no registry table any more. The config is read from the image
# (docker run, no pull for a local image); kind's own default image, not named, writes version 2.
registry_table() {
  local cfg version=2
  if [ -n "$1" ] && cfg=$(docker run --rm --entrypoint cat "$1" /etc/containerd/config.toml 2>/dev/null); then
    version=$(sed -n 's/^[[:space:]]*version[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' <<<"$cfg" | head -1)
  fi
  if [ "${version:-2}" -ge 3 ]; then
    echo 'plugins."io.containerd.cri.v1.images".registry'
  else
    echo 'plugins."io.containerd.grpc.v1.cri".registry'
  fi
}
# kubelet_gc_patch: with E2E_IMAGE_GC=1, a kubeadm patch that sets every kubelet's image garbage
# collection thresholds just above the image filesystem's usage now, as the kubelet computes it
# (100 - available*100/capacity, reserved blocks counted as used). A kind node's image filesystem
# (/var/lib/containerd on the node's /var volume) is the host disk under docker's root directory.
# Above, not below: past them from the start, every kubelet would collect every unpinned image
# nothing runs at each 5-minute pass, the images `kind load` brings and the previous release's
# image TestUpgrade expects the agents' cleanup to remove included. TestPinsHoldAgainstImageGC
# pushes the disk past them for the minutes it watches the kubelet's own collection, then frees it.
# imageMinimumGCAge 0s makes an image collectable the first time the kubelet sees it.
kubelet_gc_patch() {
  [ "${E2E_IMAGE_GC:-0}" = 1 ] || return 0
  local dir size avail usage high low
  dir=$(docker info -f '{{.DockerRootDir}}')
  read -r size avail < <(df -B1 --output=size,avail "$dir" | tail -1)
  usage=$(( 100 - avail * 100 / size ))
  high=$(( usage + ${E2E_IMAGE_GC_MARGIN:-4} ))
  [ "$high" -le 99 ] || high=99
  low=$(( high - 1 ))
  log "kubelet image GC: host disk of $dir at ${usage}% as the kubelet counts it; thresholds high ${high}%, low ${low}%, minimum age 0s"
  printf 'usage=%s\nhigh=%s\nlow=%s\n' "$usage" "$high" "$low" > "$artifacts/image-gc.env"
  echo 'kubeadmConfigPatches:'; echo '- |'
  echo '  apiVersion: kubelet.config.k8s.io/v1beta1'; echo '  kind: KubeletConfiguration'
  echo "  imageGCHighThresholdPercent: $high"; echo "  imageGCLowThresholdPercent: $low"
  echo '  imageMinimumGCAge: 0s'
}
if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  config=$artifacts/kind-config.yaml
  node_image=()
  [ -n "${KIND_NODE_IMAGE:-}" ] && node_image=(--image "$KIND_NODE_IMAGE")
  [ "$kubeadm_formation" = 1 ] && node_image=(--image "$kubeadm_from_image")
  table=$(registry_table "${node_image[1]:-}")
  log "containerd registry config_path set in [$table]"
  {
    echo 'kind: Cluster'; echo 'apiVersion: kind.x-k8s.io/v1alpha4'
    # containerd reads the hosts.toml files the chart's mirror writes only where its CRI registry
    # config_path is set; this node image does not set it (the README says what an operator sets).
    echo 'containerdConfigPatches:'; echo '- |-'
    echo "  [$table]"; echo '    config_path = "/etc/containerd/certs.d"'
    kubelet_gc_patch
    echo 'nodes:'
    echo '- role: control-plane'; echo '  labels:'; echo "    upgrade-repo-e2e/formation: $formation"
    for r in "${node_roles[@]}"; do
      case $r in control-plane) echo '- role: control-plane' ;; *) echo '- role: worker' ;; esac
      echo '  labels:'; echo "    upgrade-repo-e2e/formation: $formation"; echo "    upgrade-repo-e2e/role: $r"
    done
  } > "$config"
  log "creating cluster $cluster: formation $formation, 1 control plane + ${#node_roles[@]} workers (${node_roles[*]:-none}), ${node_image[1]:-the default node image}"
  t0=$(date +%s)
  if ! kind create cluster --name "$cluster" "${node_image[@]}" --config "$config" --kubeconfig "$kubeconfig" --wait 5m; then
    log "cluster creation failed; one more attempt from scratch"
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    kind create cluster --name "$cluster" "${node_image[@]}" --config "$config" --kubeconfig "$kubeconfig" --wait 5m
  fi
  created=1
  log "cluster created in $(( $(date +%s) - t0 ))s"
fi
# The roles, as Harvester's nodes carry them. The kubelet may not set node-role.kubernetes.io labels
# on its own node, hence kubectl. Idempotent, so a reused cluster gets them too.
retry 10 kubectl label nodes --overwrite -l upgrade-repo-e2e/role=management \
  node-role.kubernetes.io/control-plane=true node-role.kubernetes.io/etcd=true node-role.kubernetes.io/master=true >/dev/null
retry 10 kubectl label nodes --overwrite -l upgrade-repo-e2e/role=witness \
  node-role.kubernetes.io/etcd=true node-role.harvesterhci.io/witness=true >/dev/null
retry 10 kubectl taint nodes --overwrite -l upgrade-repo-e2e/role=witness node-role.kubernetes.io/etcd=true:NoExecute >/dev/null
# Several control planes: every node takes pods, as every node of a Harvester cluster does, so that
# the workload's replicas spread and a drain has somewhere to put them.
if [ "$(kubectl get nodes -l node-role.kubernetes.io/control-plane --no-headers 2>/dev/null | wc -l)" -gt 1 ]; then
  kubectl taint nodes -l node-role.kubernetes.io/control-plane node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
fi
retry 30 kubectl wait --for=condition=Ready nodes --all --timeout=60s >/dev/null
# CoreDNS may have been evicted from a witness node just now: wait for it to be back.
retry 30 kubectl -n kube-system wait --for=condition=Ready pods --all --timeout=60s >/dev/null
log "cluster ready: $(kubectl get nodes --no-headers | wc -l) nodes ($formation)"
echo "$formation" > "$artifacts/formation"

# 2. The images and the release ISO, into every node.
if [ "${E2E_PREBUILT:-0}" = 1 ] && [ -s "$artifacts/build.env" ]; then
  log "using the images and release ISO built before (E2E_PREBUILT=1)"
else
  build
fi
# shellcheck source=/dev/null # written by build
. "$artifacts/build.env"
images=("$image" "$test_image" "$upgrade_image")
rel=$artifacts/release
if [ "$kubeadm_formation" = 1 ]; then
  if [ "${E2E_PREBUILT:-0}" != 1 ] || [ ! -s "$artifacts/kubeadm-release/release.env" ]; then build_kubeadm; fi
  rel=$artifacts/kubeadm-release
  # shellcheck source=/dev/null # written by hack/kubeadm-release.sh: kubernetes, etcd, coredns, sum
  . "$rel/release.env"
  images+=("$kubeadm_image")
  if [ "${E2E_ROLLBACK:-0}" = 1 ]; then
    # The release built to fail: the target's, with an API server that exits at once.
    bad=$artifacts/kubeadm-bad-release
    if [ "${E2E_PREBUILT:-0}" != 1 ] || [ ! -s "$bad/release.env" ]; then
      UPGRADE_REPO=$artifacts/upgrade-repo K8S_WORK=$kubeadm_work BAD_COMPONENT=kube-apiserver RELEASE_VERSION=$kubernetes-bad \
        bash hack/kubeadm-release.sh "$bad"
    fi
    export E2E_BAD_RELEASE_DIR=$bad E2E_BAD_RELEASE_CHECKSUM=sha512:$(sed -n 's/^sum=//p' "$bad/release.env") \
      E2E_BAD_RELEASE_VERSION=$(sed -n 's/^release_version=//p' "$bad/release.env")
    log "built the release built to fail: $E2E_BAD_RELEASE_VERSION (kube-apiserver exits at once)"
  fi
fi
[ "$compat" = 1 ] && images+=("$script_image")
# E2E_INSTALL=bundle: the project's images, chart and CLI come from the air-gapped bundle
# (`make dist`), installed as the README's quick start says: its SHA256SUMS checked, its image
# archives loaded with `kind load image-archive`, its packaged chart installed at its own image
# tag, and its CLI run by the tests. The harness's test images still come from the local engine.
chart=charts/upgrade-repo
chart_image=(--set image.repository="${image%%:*}" --set image.tag="${image##*:}" --set image.pullPolicy=Never)
if [ "${E2E_INSTALL:-chart}" = bundle ]; then
  dist=$artifacts/dist
  rm -rf "$dist"
  VERSION=$version DIST=$dist bash hack/dist.sh
  tar -xzf "$dist/upgrade-repo-$version-linux-amd64.tar.gz" -C "$dist"
  bundle=$dist/upgrade-repo-$version-linux-amd64
  (cd "$bundle" && sha256sum --quiet -c SHA256SUMS)
  bundled=("$image")
  [ "$kubeadm_formation" = 1 ] && bundled+=("$kubeadm_image")
  kept=()
  for i in "${images[@]}"; do [[ " ${bundled[*]} " == *" $i "* ]] || kept+=("$i"); done
  images=("${kept[@]}")
  image=upgrade-repo:${version//+/-}
  archives=("$bundle/images/upgrade-repo-${version//+/-}.tar")
  if [ "$kubeadm_formation" = 1 ]; then
    kubeadm_image=upgrade-repo-kubeadm:${version//+/-}
    archives+=("$bundle/images/upgrade-repo-kubeadm-${version//+/-}.tar")
  fi
  for a in "${archives[@]}"; do retry 3 kind load image-archive "$a" --name "$cluster" >/dev/null; done
  chart=$(ls "$bundle"/charts/upgrade-repo-*.tgz)
  chart_image=()
  install -m 0755 "$bundle/bin/upgrade-repo" "$artifacts/upgrade-repo"
  log "installing from the bundle $(basename "$bundle"): SHA256SUMS checked, ${archives[*]##*/} loaded, chart $(basename "$chart"), its CLI"
fi
retry 3 kind load docker-image "${images[@]}" --name "$cluster" >/dev/null
log "images loaded: ${images[*]} ($version)"
# With the image GC thresholds of E2E_IMAGE_GC=1, the harness's own images are pinned as the node
# image's are, so that the kubelets' collection, when TestPinsHoldAgainstImageGC pushes the disk
# past them, takes only images the tests put there to be collected or left unpinned.
if [ "${E2E_IMAGE_GC:-0}" = 1 ]; then
  pin_refs=()
  for i in "${images[@]}"; do
    case $i in */*) first=${i%%/*}; case $first in *.*|*:*|localhost) pin_refs+=("$i") ;; *) pin_refs+=("docker.io/$i") ;; esac ;; *) pin_refs+=("docker.io/library/$i") ;; esac
  done
  for node in $(kind get nodes --name "$cluster"); do
    for r in "${pin_refs[@]}"; do
      docker exec "$node" ctr -n k8s.io images label "$r" io.cri-containerd.pinned=pinned >/dev/null
    done
  done
  log "pinned on every node (E2E_IMAGE_GC=1): ${pin_refs[*]}"
fi

# 3. A clean slate on a reused cluster: no release of the chart, none of its objects, no node
# cache, none of the release's images in the nodes' containerd.
helm=$(bash hack/verify-chart.sh tools)
# helm notes each link it follows into manifests/ (the chart's CRDs and roles) on stderr.
helmq() { "$helm" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
if [ "$created" = 0 ]; then
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
fi

# 4. The release ISO into the agent cache of the seed node only. The agents are pointed at an
# origin that does not answer until a test deploys it: the other nodes get the ISO from their peers.
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
# that node's own agent: the tests reach every agent through the Service from the host. The
# sequencer may run on the kind control plane too, so its two replicas can spread.
# Compatibility mode publishes each plan's repo under the product's names in harvester-system.
ensure_namespace() { kubectl get namespace "$1" >/dev/null 2>&1 || kubectl create namespace "$1" >/dev/null; }
retry 3 ensure_namespace harvester-system
retry 3 helmq upgrade --install "$release" "$chart" --namespace "$namespace" --create-namespace "${chart_image[@]}" \
  --set release.isoURL="http://e2e-origin.$namespace.svc.cluster.local/release.iso" \
  --set release.isoChecksum="sha512:$sum" --set agent.cacheDir="$cache" \
  --set service.type=NodePort --set service.externalTrafficPolicy=Local \
  --set sequencer.tolerateControlPlane=true --set compat.enabled=true --set mirror.enabled=true \
  --set log.level=debug --set agent.kubeletConfig=/var/lib/kubelet/config.yaml >/dev/null
log "chart installed as $release in $namespace"

# 6. The tests. A node's upgrade step reboots it: in kind its container exits and docker restarts
# it (kind's restart policy is on-failure:1, so only once in the container's life). Should a
# node container stay stopped, the watcher starts it again, as a machine's firmware would boot it;
# every start is logged to node-restarts.log.
watch_nodes() {
  local n state down=()
  declare -A since=()
  while sleep 2; do
    for n in $(docker ps -a --filter "label=io.x-k8s.kind.cluster=$cluster" --format '{{.Names}}'); do
      state=$(docker inspect -f '{{.State.Status}}' "$n" 2>/dev/null) || continue
      case $state in
        exited|created)
          if [ -z "${since[$n]:-}" ]; then since[$n]=$(date +%s); continue; fi
          # Give docker's own restart a few seconds first.
          [ $(( $(date +%s) - since[$n] )) -ge 6 ] || continue
          echo "$(date -u +%FT%TZ) $n was $state for 6s: docker start" >> "$artifacts/node-restarts.log"
          docker start "$n" >/dev/null 2>&1 || echo "$(date -u +%FT%TZ) $n: docker start failed" >> "$artifacts/node-restarts.log"
          unset "since[$n]" ;;
        *) unset "since[$n]" ;;
      esac
    done
  done
}
: > "$artifacts/node-restarts.log"
watch_nodes &
watcher=$!

run=()
[ -n "${E2E_RUN:-}" ] && run=(-run "$E2E_RUN")
log "running the e2e tests${E2E_RUN:+ matching $E2E_RUN}"
# The test image's own unit tests first; then the e2e package alone, so `go test -v` streams each
# test's output as it runs (with several packages it prints a package's output when it ends).
(cd e2e && go test -count=1 ./testimage >/dev/null) || { log "the test image's unit tests fail: cd e2e && go test ./testimage"; exit 1; }
(cd e2e && E2E_KUBECONFIG=$kubeconfig E2E_CLUSTER=$cluster E2E_NAMESPACE=$namespace E2E_RELEASE=$release \
  E2E_IMAGE=$image E2E_TEST_IMAGE=$test_image E2E_UPGRADE_IMAGE=$upgrade_image E2E_VERSION=$version E2E_ARTIFACTS=$artifacts \
  E2E_RELEASE_DIR=$rel E2E_ISO_CHECKSUM=sha512:$sum E2E_SEED_NODES=$seed E2E_FORMATION=$formation E2E_REBOOT=$reboot \
  E2E_SCRIPT_IMAGE=$([ "$compat" = 1 ] && echo "$script_image") \
  E2E_KUBEADM_IMAGE=$kubeadm_image E2E_KUBEADM_TARGET=${kubernetes:-} E2E_KUBEADM_ETCD=${etcd:-} E2E_KUBEADM_COREDNS=${coredns:-} \
  go test -count=1 -v -timeout "${E2E_TIMEOUT:-60m}" "${run[@]}" . 2>&1 | tee "$artifacts/go-test-$formation.log")
if [ -s "$artifacts/node-restarts.log" ]; then log "node containers started by the watcher:"; cat "$artifacts/node-restarts.log" >&2; fi
