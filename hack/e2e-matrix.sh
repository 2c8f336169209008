#!/usr/bin/env bash
# e2e-matrix.sh: the end-to-end test in every cluster formation (`make e2e-matrix`), one after the
# other, each on a fresh kind cluster (never two at once). The images and the release ISO are built
# once (hack/e2e.sh build) and reused. TestUpgrade runs in every formation; the whole suite (serve,
# agent and chart tests too) in E2E_FULL_FORMATION only; formations kubeadm and kubeadm-ha run
# TestKubeadmUpgrade (a real Kubernetes upgrade, on one or three control planes), and are skipped with a line saying why when the node image it
# starts from (E2E_KUBEADM_FROM_IMAGE) is not in the docker engine. Every formation runs even when one fails;
# the script fails if any did. At the end it prints the time each formation took and the phase
# timings of each formation's UpgradePlan (e2e/_artifacts/phase-timings.md, from the
# phases-FORMATION.tsv files TestUpgrade writes).
# Every formation but kubeadm and kubeadm-ha starts from KIND_NODE_IMAGE: Debian's containerd 1.6
# (local/kind-node:v1.34.4) or containerd 2.1 (CONTAINERD=2.1.9 ../shared/tools/kind-offline.sh
# image); hack/e2e.sh writes the containerd config patch that image's config version needs. With
# E2E_IMAGE_GC=1 the full formation's TestPinsHoldAgainstImageGC runs (it skips where containerd
# is older than 1.7.3, which ignores pins).
# Formation kubeadm-rollback is formation kubeadm on patch versions of one minor, from
# E2E_ROLLBACK_FROM_IMAGE (local/kind-node:v1.34.3) to the kubeadm release: TestKubeadmRollback
# (upgrade with a soak, roll back from the kept ISO) and TestKubeadmBadRelease (a release whose API
# server exits, stopped on its first node). The previous release is packed here from
# E2E_ROLLBACK_WORK (~/.cache/kind-offline-1.34.3, WORK=... K8S_VERSION=1.34.3
# ../shared/tools/kind-offline.sh up builds both); skipped with the reason when either is missing.
# Formation kubeadm-bundle is formation kubeadm installed from `make dist`'s bundle as the README's
# quick start says (hack/e2e.sh, E2E_INSTALL=bundle); not in the default list.
# env: E2E_FORMATIONS ("single two three witness four kubeadm kubeadm-rollback"), E2E_FULL_FORMATION (four),
#      and those of hack/e2e.sh (KIND_NODE_IMAGE, E2E_IMAGE_GC, E2E_REBOOT, E2E_STEP_REPO, E2E_TIMEOUT, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
artifacts=$PWD/e2e/_artifacts
formations=${E2E_FORMATIONS:-single two three witness four kubeadm kubeadm-rollback}
full=${E2E_FULL_FORMATION:-four}
start=$(date +%s)
log() { echo "[e2e-matrix $(date +%T) +$(( $(date +%s) - start ))s] $*" >&2; }
mkdir -p "$artifacts"
rm -f "$artifacts"/phases-*.tsv "$artifacts/matrix.tsv"
kubeadm_from_image=${E2E_KUBEADM_FROM_IMAGE:-local/kind-node:v1.33.13}
for k in kubeadm kubeadm-ha kubeadm-bundle; do
  case " $formations " in
    *" $k "*)
      if ! docker image inspect "$kubeadm_from_image" >/dev/null 2>&1; then
        log "formation $k skipped: node image $kubeadm_from_image is not in the docker engine (WORK=~/.cache/kind-offline-1.33 K8S_VERSION=1.33.13 ../shared/tools/kind-offline.sh up builds it)"
        formations=$(echo " $formations " | sed "s/ $k / /")
      fi ;;
  esac
done

if [ -n "${KIND_NODE_IMAGE:-}" ]; then
  ctr_version=$(docker run --rm --entrypoint containerd "$KIND_NODE_IMAGE" --version 2>/dev/null || echo "unknown containerd")
  log "node image $KIND_NODE_IMAGE: $ctr_version${E2E_IMAGE_GC:+, E2E_IMAGE_GC=$E2E_IMAGE_GC}"
fi
rollback_from_image=${E2E_ROLLBACK_FROM_IMAGE:-local/kind-node:v1.34.3}
rollback_work=${E2E_ROLLBACK_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/kind-offline-1.34.3}
case " $formations " in
  *" kubeadm-rollback "*)
    if ! docker image inspect "$rollback_from_image" >/dev/null 2>&1 || [ ! -s "$rollback_work/required-images.txt" ]; then
      log "formation kubeadm-rollback skipped: node image $rollback_from_image or $rollback_work is missing (WORK=$rollback_work K8S_VERSION=1.34.3 ../shared/tools/kind-offline.sh up builds both)"
      formations=$(echo " $formations " | sed "s/ kubeadm-rollback / /")
    fi ;;
esac

t0=$(date +%s)
build_kubeadm=0
case " $formations " in *" kubeadm "*|*" kubeadm-ha "*|*" kubeadm-rollback "*|*" kubeadm-bundle "*) build_kubeadm=1 ;; esac
E2E_BUILD_KUBEADM=$build_kubeadm bash hack/e2e.sh build
build_s=$(( $(date +%s) - t0 ))
log "images and release ISO built in ${build_s}s"

failed=()
for f in $formations; do
  run=('^TestUpgrade$')
  [ "$f" = "$full" ] && run=('')
  case $f in kubeadm|kubeadm-ha|kubeadm-bundle) run=('^TestKubeadmUpgrade$') ;; kubeadm-rollback) run=('^(TestKubeadmRollback|TestKubeadmBadRelease)$') ;; esac
  log "formation $f: starting (${run[0]:-every test})"
  t0=$(date +%s)
  rc=0
  if [ "$f" = kubeadm-rollback ]; then
    prev=$artifacts/kubeadm-previous-release
    UPGRADE_REPO=$artifacts/upgrade-repo K8S_WORK=$rollback_work bash hack/kubeadm-release.sh "$prev" > "$artifacts/matrix-$f.log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] && E2E_FORMATION=kubeadm E2E_KUBEADM_FROM_IMAGE=$rollback_from_image E2E_ROLLBACK=1 E2E_ROLLBACK_PREVIOUS_DIR=$prev \
      E2E_ROLLBACK_PREVIOUS_CHECKSUM=sha512:$(sed -n 's/^sum=//p' "$prev/release.env") E2E_PREBUILT=1 E2E_FRESH=1 E2E_KEEP=0 E2E_RUN=${run[0]} \
      bash hack/e2e.sh run >> "$artifacts/matrix-$f.log" 2>&1 || rc=$?
  elif [ "$f" = kubeadm-bundle ]; then
    E2E_FORMATION=kubeadm E2E_INSTALL=bundle E2E_PREBUILT=1 E2E_FRESH=1 E2E_KEEP=0 E2E_RUN=${run[0]} bash hack/e2e.sh run \
      > "$artifacts/matrix-$f.log" 2>&1 || rc=$?
  else
    E2E_FORMATION=$f E2E_PREBUILT=1 E2E_FRESH=1 E2E_KEEP=0 E2E_RUN=${run[0]} bash hack/e2e.sh run \
      > "$artifacts/matrix-$f.log" 2>&1 || rc=$?
  fi
  secs=$(( $(date +%s) - t0 ))
  created=$(grep -o 'cluster created in [0-9]*s' "$artifacts/matrix-$f.log" | grep -o '[0-9]*' | tail -1 || true)
  result=passed
  if [ "$rc" -ne 0 ]; then result=FAILED; failed+=("$f"); fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$f" "$result" "$secs" "${created:-?}" "${run[0]:-all}" >> "$artifacts/matrix.tsv"
  log "formation $f: $result in ${secs}s (cluster created in ${created:-?}s; log e2e/_artifacts/matrix-$f.log)"
  if [ "$rc" -ne 0 ]; then
    grep -E -- '--- FAIL|Error Trace|Error:|FAILED' "$artifacts/matrix-$f.log" | head -20 >&2 || true
    # Keep the failed formation's dump apart from the next formation's.
    [ -d "$artifacts/dump" ] && rm -rf "$artifacts/dump-$f" && mv "$artifacts/dump" "$artifacts/dump-$f"
  fi
done

# The tables: per formation, and the phase timings of its plan (seconds in each phase, from the
# plan's phaseTransitionTimestamps: a phase lasts until the next one starts).
{
  echo "| formation | result | wall time | cluster created | tests |"
  echo "|---|---|---|---|---|"
  awk -F'\t' '{ printf "| %s | %s | %dm%02ds | %ss | %s |\n", $1, $2, $3/60, $3%60, $4, $5 }' "$artifacts/matrix.tsv"
  echo
  echo "Phase timings of each formation's UpgradePlan, in seconds:"
  echo
  first=1
  for f in $formations; do
    t=$artifacts/phases-$f.tsv
    [ -s "$t" ] || continue
    if [ "$first" = 1 ]; then
      head -1 "$t" | awk -F'\t' '{ s = "|"; for (i = 1; i <= NF; i++) s = s " " $i " |"; print s; s = "|"; for (i = 1; i <= NF; i++) s = s "---|"; print s }'
      first=0
    fi
    tail -n +2 "$t" | awk -F'\t' '{ s = "|"; for (i = 1; i <= NF; i++) s = s " " $i " |"; print s }'
  done
} > "$artifacts/phase-timings.md"
log "build ${build_s}s, matrix total $(( $(date +%s) - start ))s"
cat "$artifacts/phase-timings.md" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED formations: ${failed[*]}"
  exit 1
fi
log "every formation passed"
