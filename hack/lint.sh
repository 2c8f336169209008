#!/usr/bin/env bash
# lint.sh: gofmt and go vet (through verify.sh), then golangci-lint at a pinned version,
# installed from the Go module proxy into bin/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-v2.6.2}
bash hack/verify.sh
bin=$PWD/bin
if [ ! -x "$bin/golangci-lint-$version" ]; then
  GOBIN=$bin go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
  mv "$bin/golangci-lint" "$bin/golangci-lint-$version"
fi
"$bin/golangci-lint-$version" run ./...
