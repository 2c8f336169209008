#!/usr/bin/env bash
# bench-nodes.sh: the node phase of one UpgradePlan over many simulated nodes, driven by the real
# sequencer, at each size of SIZES (default 100,1000). No kind cluster and no docker: a local etcd
# and kube-apiserver from BIN_DIR (default /root/.cache/kind-offline/bin, which also holds
# kubectl), the CRDs of manifests/crd, kwok's fake nodes (sigs.k8s.io/kwok, pinned in
# hack/kwok/go.mod, built here; when it cannot be built the nodes are created Ready and left be,
# and the table says "own fake"), fake agents and a fake node step (hack/benchnodes/fakes.go says
# exactly what they do), and the upgrade-repo binary built from cmd/.
#
# Printed per size: the plan's wall time (first cordon to last Upgraded) against the ideal (the
# nodes' step times over the concurrency), the sequencer's CPU seconds and peak RSS (/proc), its
# API requests (the API server's audit log, by the sequencer's user) in all and per node, and the
# distribution of the sequencer's own time per node (sequencer.NodeTimings). BENCH_NODES_ARGS
# passes more flags to hack/benchnodes (-concurrency, -step, -zones, -heartbeat, -work-dir, and -pprof
# to keep the sequencer's CPU and heap profiles in the work directory).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN_DIR=${BIN_DIR:-/root/.cache/kind-offline/bin}
SIZES=${SIZES:-100,1000}
for b in etcd kube-apiserver kubectl; do
  if [ ! -x "$BIN_DIR/$b" ]; then
    echo "bench-nodes: $BIN_DIR/$b is missing (set BIN_DIR to a directory holding etcd, kube-apiserver and kubectl)" >&2
    exit 1
  fi
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "bench-nodes: building upgrade-repo, hack/benchnodes and kwok" >&2
$GO build -o "$out/upgrade-repo" ./cmd/upgrade-repo
$GO build -o "$out/benchnodes" ./hack/benchnodes
kwok=()
if (cd hack/kwok && $GO build -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok); then
  stages=$(cd hack/kwok && $GO list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/node
  kwok=(-kwok "$out/kwok" -kwok-stages "$stages/fast/node-initialize.yaml,$stages/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
else
  echo "bench-nodes: kwok could not be built: the nodes are created Ready and left be (no heartbeats)" >&2
fi
# shellcheck disable=SC2086 # BENCH_NODES_ARGS is a list of flags
"$out/benchnodes" -sizes "$SIZES" -bin-dir "$BIN_DIR" -kubectl "$BIN_DIR/kubectl" -sequencer "$out/upgrade-repo" "${kwok[@]}" ${BENCH_NODES_ARGS:-}
