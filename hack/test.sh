#!/usr/bin/env bash
# test.sh GO-TEST-ARGS...: runs `go test` with the given arguments, then hack/verify.sh, and ends
# with one line that says what ran and passed (`make test`), or which packages failed.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
echo "+ $go test $*" >&2
status=0
"$go" test "$@" 2>&1 | tee "$log" || status=$?
ok=$(grep -c '^ok ' "$log" || true)
none=$(grep -c '^? .*\[no test files\]' "$log" || true)
failed=$(grep -E '^(FAIL|---) ' "$log" | grep -E '^FAIL\s+\S+' | awk '{print $2}' | sort -u | tr '\n' ' ' || true)
if [ "$status" -ne 0 ]; then
  echo "make test: FAILED: go test: ${failed:-see above} ($ok packages passed, $((SECONDS - start))s)" >&2
  exit "$status"
fi
bash hack/verify.sh || {
  echo "make test: FAILED: the checks (hack/verify.sh; see above), after go test passed in $ok packages" >&2
  exit 1
}
echo "make test: passed: go test ($ok packages ok, $none without tests), then gofmt, go vet and every hack/verify-*.sh, in $((SECONDS - start))s" >&2
