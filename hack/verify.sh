#!/usr/bin/env bash
# verify.sh runs the static checks that `make test` and `make verify` share: gofmt, go vet,
# then every hack/verify-*.sh (generated files, chart rendering, dependency boundaries).
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null; find . -name '*.go' -newer go.mod -not -path './.cache/*' 2>/dev/null) 2>/dev/null | sort -u || true)
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
for f in hack/verify-*.sh; do
  [ -e "$f" ] || continue
  echo "verify: $f" >&2
  bash "$f"
done
