#!/usr/bin/env bash
# lint.sh [VERSION]: gofmt and go vet (through verify.sh), then golangci-lint at a pinned version
# with the linters and dependency rules of .golangci.yml. golangci-lint is installed from the Go
# module proxy into bin/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-v2.6.2}
bash hack/verify.sh
bin=$PWD/bin
lint=$bin/golangci-lint-$version
if [ ! -x "$lint" ]; then
  echo "lint: installing golangci-lint $version (first use compiles it)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
  mkdir -p "$bin"
  mv "$tmp/golangci-lint" "$lint"
fi
# Several checkouts may lint at once on one machine: wait for the shared cache instead of failing.
"$lint" run --allow-parallel-runners ./...
