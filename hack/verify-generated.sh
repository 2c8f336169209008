#!/usr/bin/env bash
# verify-generated.sh regenerates the derived files and fails when they differ from what is
# committed, or when generation produced files that are not committed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/generate.sh
paths=(':(glob)api/**/zz_generated.*.go' manifests/crd manifests/rbac)
if ! git diff --exit-code -- "${paths[@]}"; then
  echo "verify-generated: generated files are out of date; run make generate and commit" >&2
  exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- "${paths[@]}")
if [ -n "$untracked" ]; then
  echo "verify-generated: generated files are not committed:" >&2
  echo "$untracked" >&2
  exit 1
fi
