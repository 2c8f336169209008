#!/usr/bin/env bash
# lint.sh VERSION: gofmt and go vet (through verify.sh), the module's dependency rules and a check
# that every path .golangci.yml names matches a Go file of the module (internal/boundary's tests),
# then golangci-lint VERSION with the linters of .golangci.yml. The version is pinned in one place, the Makefile's GOLANGCI_VERSION, which
# `make lint` passes. golangci-lint is installed from the Go module proxy into bin/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: hack/lint.sh VERSION (run make lint: the Makefile pins the version)" >&2
  exit 2
fi
version=$1
bash hack/verify.sh
# The dependency rules live in internal/boundary alone; a rule of .golangci.yml whose path matches
# nothing (left behind by a move) guards nothing: both fail before linting.
echo "lint: the dependency rules hold and .golangci.yml names only paths that exist (internal/boundary)" >&2
go test -count=1 ./internal/boundary
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
