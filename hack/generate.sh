#!/usr/bin/env bash
# generate.sh regenerates everything derived from the Go API types and kubebuilder markers:
# deepcopy functions (api/v1beta1/zz_generated.deepcopy.go), the CRDs (manifests/crd/) and the
# RBAC roles of the sequencer and of the node agent (manifests/rbac/). controller-gen is installed
# at a pinned version from the Go module proxy into bin/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${CONTROLLER_GEN_VERSION:-v0.23.0}
bin=$PWD/bin
gen=$bin/controller-gen-$version
if [ ! -x "$gen" ]; then
  mkdir -p "$bin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$version"
  mv "$tmp/controller-gen" "$gen"
fi
"$gen" object paths=./api/...
rm -rf manifests/crd manifests/rbac
"$gen" crd paths=./api/... output:crd:artifacts:config=manifests/crd
"$gen" rbac:roleName=upgrade-repo-sequencer paths=./sequencer output:rbac:artifacts:config=manifests/rbac/sequencer
"$gen" rbac:roleName=upgrade-repo-agent paths="./sequencer/report/...;./agent" output:rbac:artifacts:config=manifests/rbac/agent
# The chart's README, when there is a chart and a generator for it.
if [ -x hack/generate-chart.sh ]; then bash hack/generate-chart.sh; fi
