#!/usr/bin/env bash
# generate-chart.sh regenerates what the Helm chart and the kustomize base derive from the rest of
# the tree: the chart README (helm-docs), the chart's copies of the generated CRDs and ClusterRole
# rules, and manifests/ (the chart rendered with its defaults). hack/generate.sh calls it.
set -euo pipefail
exec bash "$(dirname "$0")/verify-chart.sh" update
