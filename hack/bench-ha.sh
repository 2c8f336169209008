#!/usr/bin/env bash
# bench-ha.sh: formation kubeadm-ha's upgrade (three control planes and a worker, v1.33 to the
# release's v1.34) done two ways, one after the other, each on a fresh kind cluster (`make bench-ha`):
#   1. by hand, as an operator does it without this project: the release's images loaded into each
#      node (`docker save | ctr images import`), kubeadm copied in, then node by node: drain,
#      `kubeadm upgrade apply` on the first control plane and `kubeadm upgrade node` on the others,
#      the kubelet and kubectl replaced, the kubelet restarted, Ready, uncordon;
#   2. by an UpgradePlan (`E2E_FORMATION=kubeadm-ha make e2e`, faults included), whose
#      NodeUpgrading wall time is set against the sum of its steps' kubeadm commands
#      (e2e/_artifacts/ha-timings.txt) and whose fault log is e2e/_artifacts/faults-kubeadm-ha.log.
# Prints both wall times and the ratios. BENCH_HA_SKIP_E2E=1 runs the hand upgrade alone.
# env: E2E_KUBEADM_FROM_IMAGE (local/kind-node:v1.33.13), E2E_KUBEADM_WORK (~/.cache/kind-offline).
set -euo pipefail
cd "$(dirname "$0")/.."
from_image=${E2E_KUBEADM_FROM_IMAGE:-local/kind-node:v1.33.13}
work=${E2E_KUBEADM_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline}
cluster=upgrade-repo-bench-ha
artifacts=$PWD/e2e/_artifacts
mkdir -p "$artifacts"
export PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline/bin
log() { echo "[bench-ha $(date +%T)] $*" >&2; }
kubeconfig=$artifacts/bench-ha.kubeconfig
k() { kubectl --kubeconfig "$kubeconfig" "$@"; }
mapfile -t refs < <(grep -v '^\s*\(#\|$\)' "$work/required-images.txt")
target=$("$work/bin/kubeadm" version -o short)

cat > "$artifacts/bench-ha-kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: control-plane
- role: control-plane
- role: worker
EOF
kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
trap 'kind delete cluster --name "$cluster" >/dev/null 2>&1 || true' EXIT
log "creating $cluster from $from_image"
kind create cluster --name "$cluster" --image "$from_image" --config "$artifacts/bench-ha-kind.yaml" --kubeconfig "$kubeconfig" --wait 5m >/dev/null
k taint nodes -l node-role.kubernetes.io/control-plane node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
mapfile -t nodes < <(kind get nodes --name "$cluster" | sort)
cps=(); workers=()
for n in "${nodes[@]}"; do case $n in *control-plane*) cps+=("$n");; *) workers+=("$n");; esac; done

start=$(date +%s)
t0=$(date +%s)
docker save "${refs[@]}" > "$artifacts/bench-ha-images.tar"
for n in "${nodes[@]}"; do
  docker exec -i "$n" ctr -n k8s.io images import - < "$artifacts/bench-ha-images.tar" >/dev/null
  for b in kubeadm kubelet kubectl; do docker cp "$work/bin/$b" "$n:/usr/local/bin/$b.new" >/dev/null; done
done
rm -f "$artifacts/bench-ha-images.tar"
load_s=$(( $(date +%s) - t0 ))
log "images and binaries into ${#nodes[@]} nodes in ${load_s}s"

kubeadm_s=0
upgrade_node() { # NODE ACTION
  local n=$1 t s e
  k drain "$n" --ignore-daemonsets --delete-emptydir-data --timeout 5m >/dev/null
  docker exec "$n" sh -c 'install -m 755 /usr/local/bin/kubeadm.new /usr/bin/kubeadm'
  s=$(date +%s)
  if [ "$2" = apply ]; then
    docker exec "$n" kubeadm upgrade apply "$target" --yes >/dev/null
  else
    docker exec "$n" kubeadm upgrade node >/dev/null
  fi
  e=$(date +%s); kubeadm_s=$(( kubeadm_s + e - s ))
  docker exec "$n" sh -c 'install -m 755 /usr/local/bin/kubectl.new /usr/bin/kubectl && install -m 755 /usr/local/bin/kubelet.new /usr/bin/kubelet && systemctl daemon-reload && systemctl restart kubelet'
  t=$(date +%s)
  until [ "$(k get node "$n" -o jsonpath='{.status.nodeInfo.kubeletVersion}' 2>/dev/null)" = "$target" ] &&
        k wait --for=condition=Ready node "$n" --timeout=5s >/dev/null 2>&1; do
    [ $(( $(date +%s) - t )) -lt 300 ] || { log "$n not Ready at $target"; exit 1; }
    sleep 2
  done
  k uncordon "$n" >/dev/null
  log "$n: $2 done"
}
t0=$(date +%s)
upgrade_node "${cps[0]}" apply
for n in "${cps[@]:1}" "${workers[@]}"; do upgrade_node "$n" node; done
nodes_s=$(( $(date +%s) - t0 ))
hand_s=$(( $(date +%s) - start ))
log "by hand: ${hand_s}s in all (loading ${load_s}s, node by node ${nodes_s}s, of which kubeadm ${kubeadm_s}s)"
kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
printf 'by hand\t%s\t%s\t%s\t%s\n' "$hand_s" "$load_s" "$nodes_s" "$kubeadm_s" > "$artifacts/bench-ha.tsv"

if [ "${BENCH_HA_SKIP_E2E:-0}" != 1 ]; then
  E2E_FORMATION=kubeadm-ha E2E_FRESH=1 bash hack/e2e.sh run > "$artifacts/bench-ha-e2e.log" 2>&1 || { log "the e2e failed: see $artifacts/bench-ha-e2e.log"; exit 1; }
  grep -E 'lasted|succeeded after' "$artifacts/bench-ha-e2e.log" | sed 's/^ *//' >&2 || true
  cat "$artifacts/ha-timings.txt" >&2 || true
fi
