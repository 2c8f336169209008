#!/usr/bin/env bash
# node-timings.sh PLAN: prints how the node phase of UpgradePlan PLAN spent its time, node by node
# (the wait for a slot, the drain, the node step and the sequencer's own time) and the
# distribution of the sequencer's time per node, from the plan's own node times. KUBECTL
# (default kubectl) reads the plan, from the current context or KUBECONFIG: the kind e2e's
# cluster, for one. GO is the go command.
set -euo pipefail
cd "$(dirname "$0")/.."
plan=${1:?usage: hack/node-timings.sh PLAN}
${KUBECTL:-kubectl} get upgradeplans.management.harvesterhci.io "$plan" -o json | ${GO:-go} run ./hack/nodetimings
