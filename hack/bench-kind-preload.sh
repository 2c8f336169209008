#!/usr/bin/env bash
# bench-kind-preload.sh: the preload of a real Kubernetes release, measured inside a kind node
# against that node's own containerd, beside what a user would run instead and beside the floor,
# side by side in one run.
#
# The release is the kubeadm release ISO of v1.34.4 (hack/kubeadm-release.sh: kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS and pause in one zstd
# archive). The node is one kind node of the version before it (BENCH_NODE_IMAGE,
# local/kind-node:v1.33.13), whose containerd does not hold those images; a node of the release's
# own version would hold them already. What the release shares with the node's own images (the
# pause image, kube-proxy's base layer) stays on the node and is written by no side, as in the
# real upgrade; the run lists it.
#
# Sides, each run inside the node (`docker exec`) and timed there from start to end:
#   preload:          upgrade-repo preload --iso ISO, with the agent's defaults: --unpack into
#                     overlayfs in one pass and direct ingest into containerd's content directory;
#                     the paths it took are read from its log (UPGRADE_REPO_LOG_LEVEL=debug);
#   preload-containerd: the same with --one-pass=false: containerd unpacks after the import, what
#                     the chart's agent did without agent.containerdSnapshotterDir;
#   preload-service:  the same with --direct-ingest=false: every blob through containerd's content
#                     service, what the chart's agent did without agent.containerdContentDir;
#   ctr:              zstdcat ARCHIVE | ctr -n k8s.io images import - (archive after archive; ctr
#                     unpacks into overlayfs by default, as preload does);
#   floor:            zstd -d ARCHIVE -o FILE on the node's disk (/var, not the node's /tmp, a
#                     tmpfs), then sync FILE: the decode and the write of the archive's bytes, no
#                     hashing, no unpacking. The file alone is synced, not every file system.
#   With BENCH_NOUNPACK=1 (the default) also preload --unpack=false, both ways of ingest, against
#   ctr import --no-unpack.
# The ISO and the archives sit in the node's /var/tmp and are read from the page cache by every
# side. After each import the run checks that every listed image is present and, where the side
# unpacks, that the top snapshot of every image is there; then it removes every image the run
# added (ctr images rm --sync) and checks that every blob and snapshot the run added is gone, so
# every run writes everything. CPU is the side's commands' (GNU time, copied into the node with
# zstd: the node image has neither) plus the node's containerd's. Each side runs BENCH_ROUNDS
# times in alternating order; the fastest run of each counts. Ends with a table and name=value
# lines.
#
# The cluster (BENCH_CLUSTER, bench-preload) is created for the run and deleted at its end unless
# BENCH_KEEP=1; the run refuses to start beside another kind cluster (BENCH_BESIDE=1 runs anyway:
# the figures then include the other cluster's load).
#
# Knobs: BENCH_ROUNDS (3), BENCH_NOUNPACK (1), BENCH_KEEP (0), BENCH_BESIDE (0), BENCH_CLUSTER,
# BENCH_NODE_IMAGE, BENCH_ISO (default: e2e/_artifacts/kubeadm-release/release.iso when the e2e
# built it, else .cache/kubeadm-release/release.iso, built from K8S_WORK when missing), K8S_WORK
# (~/.cache/kind-offline: kind and kubectl in its bin/, and the release's images and binaries),
# BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=$(realpath "${BIN:-bin/upgrade-repo}")
ROUNDS=${BENCH_ROUNDS:-3}
NOUNPACK=${BENCH_NOUNPACK:-1}
CLUSTER=${BENCH_CLUSTER:-bench-preload}
NODE_IMAGE=${BENCH_NODE_IMAGE:-local/kind-node:v1.33.13}
K8S_WORK=${K8S_WORK:-$HOME/.cache/kind-offline}
export PATH=$K8S_WORK/bin:$PATH
# D is the bench's directory in the node, on the disk containerd writes to.
D=/var/tmp/bench-kind-preload
CONTENT=/var/lib/containerd/io.containerd.content.v1.content
STAGE=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/upgrade-repo.unpack
TIMEFMT='%M %U %S'

for tool in docker kind jq bc zstd /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench-kind-preload: $tool missing (make deps; kind from K8S_WORK/bin)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "bench-kind-preload: $BIN missing (make build)" >&2; exit 1; }
docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 || { echo "bench-kind-preload: node image $NODE_IMAGE is not in the docker engine" >&2; exit 1; }

ISO=${BENCH_ISO:-}
if [ -z "$ISO" ]; then
  ISO=e2e/_artifacts/kubeadm-release/release.iso
  [ -s "$ISO" ] || ISO=.cache/kubeadm-release/release.iso
  if [ ! -s "$ISO" ]; then
    echo "bench-kind-preload: building the release ISO from $K8S_WORK into $(dirname "$ISO")" >&2
    UPGRADE_REPO=$BIN K8S_WORK=$K8S_WORK bash hack/kubeadm-release.sh "$(dirname "$ISO")"
  fi
fi
[ -s "$ISO" ] || { echo "bench-kind-preload: no release ISO at $ISO" >&2; exit 1; }
ISO=$(realpath "$ISO")

# The release's archives and image lists, from the ISO's bundle/metadata.yaml (paths under bundle/).
meta=$("$BIN" iso cat "$ISO" bundle/metadata.yaml)
mapfile -t ARCHIVES < <(awk '$NF ~ /\.tar(\.zst)?$/ && /archive:/ { print "bundle" $NF }' <<<"$meta")
mapfile -t LISTS < <(awk '/list:/ { print "bundle" $NF }' <<<"$meta")
[ "${#ARCHIVES[@]}" -gt 0 ] || { echo "bench-kind-preload: $ISO lists no archive" >&2; exit 1; }
mapfile -t REFS < <(for l in "${LISTS[@]}"; do "$BIN" iso cat "$ISO" "$l"; done | grep -v '^\s*\(#\|$\)' | sort -u)
VERSION=$("$BIN" iso cat "$ISO" harvester-release.yaml | awk '$1 == "kubernetes:" { print $2 }')

if kind get clusters 2>/dev/null | grep -qxF "$CLUSTER"; then
  echo "bench-kind-preload: kind cluster $CLUSTER exists; delete it or set BENCH_CLUSTER" >&2; exit 1
fi
others=$(kind get clusters 2>/dev/null | tr '\n' ' ')
if [ -n "${others// }" ] && [ "${BENCH_BESIDE:-0}" != 1 ]; then
  echo "bench-kind-preload: kind cluster(s) $others run on this machine: the bench would measure them too (BENCH_BESIDE=1 runs anyway)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-kind-preload.XXXXXX")
created=0
cleanup() {
  if [ "$created" = 1 ]; then
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
      echo "bench-kind-preload: keeping cluster $CLUSTER (kind delete cluster --name $CLUSTER)" >&2
    else
      kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "bench-kind-preload: creating kind cluster $CLUSTER from $NODE_IMAGE" >&2
created=1
kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --kubeconfig "$work/kubeconfig" --wait 5m >&2
NODE=$(kind get nodes --name "$CLUSTER" | head -1)
# The control plane's pods settle before anything is timed.
KUBECONFIG=$work/kubeconfig kubectl wait --for=condition=Ready nodes --all --timeout=300s >/dev/null
KUBECONFIG=$work/kubeconfig kubectl -n kube-system wait --for=condition=Ready pods --all --timeout=300s >/dev/null

node() { docker exec "$NODE" "$@"; }
nctr() { docker exec "$NODE" ctr -n k8s.io "$@"; }

docker exec "$NODE" mkdir -p "$D"
docker cp -q "$BIN" "$NODE:$D/upgrade-repo"
docker cp -q "$ISO" "$NODE:$D/release.iso"
docker cp -q -L "$(command -v zstd)" "$NODE:$D/zstd"
docker cp -q -L /usr/bin/time "$NODE:$D/time"
node ln -sf zstd "$D/zstdcat"
NODE_ARCHIVES=()
for a in "${ARCHIVES[@]}"; do
  node sh -c "$D/upgrade-repo iso cat $D/release.iso $a > $D/$(basename "$a")"
  NODE_ARCHIVES+=("$D/$(basename "$a")")
done
node "$D/zstd" --version >/dev/null || { echo "bench-kind-preload: the host's zstd does not run in the node" >&2; exit 1; }

ARCHIVE_BYTES=$(node stat -c %s "${NODE_ARCHIVES[@]}" | awk '{ n += $1 } END { print n }')
TAR_BYTES=$(node sh -c "$D/zstdcat -q ${NODE_ARCHIVES[*]} | wc -c")
CONTAINERD_VERSION=$(node containerd --version | awk '{ print $3 }')
NODE_FS=$(node df --output=fstype /var/lib/containerd | tail -1 | tr -d ' ')
TMP_FS=$(node df --output=fstype /tmp | tail -1 | tr -d ' ')
# The host's PID of the node's containerd, whose CPU counts for every side.
CPID=$(docker top "$NODE" -eo pid,comm | awk '$2 == "containerd" { print $1; exit }')
[ -n "$CPID" ] || { echo "bench-kind-preload: no containerd in $NODE" >&2; exit 1; }

images() { nctr images ls -q | sort -u; }
# targets: "name manifest-digest" of every image.
targets() { nctr images ls | awk 'NR > 1 { print $1, $3 }' | sort -u; }
content() { nctr content ls -q | sort -u; }
snapshots() { nctr snapshots --snapshotter overlayfs ls | awk 'NR > 1 { print $1 }' | sort -u; }
images >"$work/images0"; targets >"$work/targets0"; content >"$work/content0"; snapshots >"$work/snapshots0"
held=$(printf '%s\n' "${REFS[@]}" | grep -xF -f "$work/images0" || true)
[ -z "$held" ] || { echo "bench-kind-preload: $NODE holds release images before the first run: $held" >&2; exit 1; }

# blobs_of DIGEST: DIGEST and every blob it references (manifests of an index, configs, layers).
blobs_of() {
  local j m
  echo "$1"
  j=$(nctr content get "$1")
  if jq -e 'has("manifests")' <<<"$j" >/dev/null; then
    for m in $(jq -r '.manifests[].digest' <<<"$j"); do blobs_of "$m"; done
  else
    jq -r '.config.digest, .layers[].digest' <<<"$j"
  fi
}
# top_snapshot REF: the chain ID of REF's top layer (the key of its committed snapshot), from the
# config of its linux/amd64 manifest.
top_snapshot() {
  local d j c="" diff
  d=$(nctr images ls "name==$1" | awk 'NR == 2 { print $3 }')
  j=$(nctr content get "$d")
  if jq -e 'has("manifests")' <<<"$j" >/dev/null; then
    d=$(jq -r '[.manifests[] | select(.platform.os == "linux" and .platform.architecture == "amd64")][0].digest' <<<"$j")
    j=$(nctr content get "$d")
  fi
  for diff in $(nctr content get "$(jq -r .config.digest <<<"$j")" | jq -r '.rootfs.diff_ids[]'); do
    if [ -z "$c" ]; then c=$diff; else c=sha256:$(printf '%s %s' "$c" "$diff" | sha256sum | cut -d' ' -f1); fi
  done
  echo "$c"
}
# bytes_of DIGEST...: the bytes of these blobs in the node's content directory.
bytes_of() {
  [ "$#" -gt 0 ] || { echo 0; return; }
  node sh -c "cd $CONTENT/blobs/sha256 && stat -c %s $(printf '%s ' "${@#sha256:}")" | awk '{ n += $1 } END { print n + 0 }'
}

# check SIDE UNPACK: every listed image is present and, with UNPACK=1, unpacked; prints
# "images unpacked blobs-added bytes-added". The first import also records the release's blobs
# and top snapshots.
check() {
  local side=$1 unpack=$2 have n=0 u=0 r added
  images >"$work/images"; content >"$work/content"; snapshots >"$work/snapshots"
  for r in "${REFS[@]}"; do grep -qxF "$r" "$work/images" && n=$((n + 1)); done
  if [ "$n" -ne "${#REFS[@]}" ]; then
    echo "bench-kind-preload: $side: $n of ${#REFS[@]} listed images present:" >&2
    printf '%s\n' "${REFS[@]}" | grep -vxF -f "$work/images" >&2; exit 1
  fi
  if [ ! -s "$work/tops" ]; then
    for r in "${REFS[@]}"; do
      echo "$r $(top_snapshot "$r")" >>"$work/tops"
      blobs_of "$(nctr images ls "name==$r" | awk 'NR == 2 { print $3 }')" >>"$work/blobs.all"
    done
    sort -u -o "$work/blobs" "$work/blobs.all"
  fi
  while read -r r have; do grep -qxF "$have" "$work/snapshots" && u=$((u + 1)); done <"$work/tops"
  if [ "$unpack" = 1 ] && [ "$u" -ne "${#REFS[@]}" ]; then
    echo "bench-kind-preload: $side: $u of ${#REFS[@]} images unpacked" >&2; exit 1
  fi
  comm -13 "$work/content0" "$work/content" >"$work/added.content"
  comm -13 "$work/snapshots0" "$work/snapshots" >"$work/added.snapshots"
  mapfile -t added <"$work/added.content"
  echo "$n $u ${#added[@]} $(bytes_of "${added[@]}")"
}
# remove SIDE: removes every image the run added and checks that the blobs and snapshots it added
# are gone (the garbage collector of `rm --sync` has run; a lease left behind would keep them).
remove() {
  local left_c left_s i names
  # An import of an image whose config the node already holds (pause:3.10.1 is pause:3.10) moves
  # the node's own image-ID reference (sha256:<config>) to the imported manifest; it is moved back
  # to the manifest it named before, from an image of the node that still names that manifest.
  local name was src
  while read -r name was; do
    src=$(awk -v n="$name" -v t="$was" '$2 == t && $1 != n { print $1; exit }' "$work/targets0")
    [ -n "$src" ] || { echo "bench-kind-preload: $1: the node's image $name moved, and no image names its manifest $was" >&2; exit 1; }
    nctr images tag --force "$src" "$name" >/dev/null
  done < <(join <(cut -d' ' -f1,2 "$work/targets0") <(targets) | awk '$2 != $3 { print $1, $2 }')
  images >"$work/images"
  mapfile -t names < <(comm -13 "$work/images0" "$work/images")
  [ "${#names[@]}" -eq 0 ] || nctr images rm --sync "${names[@]}" >/dev/null
  [ -z "$(comm -13 "$work/targets0" <(targets))" ] || { echo "bench-kind-preload: $1: the node's images differ from before the run:" >&2; comm -3 "$work/targets0" <(targets) >&2; exit 1; }
  for i in $(seq 1 30); do
    content >"$work/content"; snapshots >"$work/snapshots"
    left_c=$(comm -12 "$work/added.content" "$work/content" | grep -c . || true)
    left_s=$(comm -12 "$work/added.snapshots" "$work/snapshots" | grep -c . || true)
    [ "$left_c" -eq 0 ] && [ "$left_s" -eq 0 ] && break
    [ "$i" -lt 30 ] || {
      echo "bench-kind-preload: $1: $left_c blob(s) and $left_s snapshot(s) left after removing the images:" >&2
      comm -12 "$work/added.content" "$work/content" >&2; nctr leases ls >&2; exit 1
    }
    sleep 1
  done
  [ -z "$(comm -13 "$work/images0" <(images))" ] || { echo "bench-kind-preload: $1: images left after removal" >&2; exit 1; }
  if node test -d "$CONTENT/upgrade-repo.ingest" && [ -n "$(node ls -A "$CONTENT/upgrade-repo.ingest")" ]; then
    echo "bench-kind-preload: $1: files left in $CONTENT/upgrade-repo.ingest" >&2; exit 1
  fi
  if node test -d "$STAGE" && [ -n "$(node ls -A "$STAGE")" ]; then
    echo "bench-kind-preload: $1: layers left staged in $STAGE" >&2; exit 1
  fi
  # What the removal left dirty is written now, not during the next run.
  node sync
}

cpu_of() { proc "$CPID" | awk '{ print $2 }'; }

# Each run appends one line to $work/SIDE: "seconds command-cpu containerd-cpu peak-RSS-KiB
# images unpacked blobs-added bytes-added ingest".
run_preload() {
  local side=$1 unpack=$2 c0 c1 t ingest res rss u s
  shift 2
  c0=$(cpu_of)
  t=$(docker exec -e UPGRADE_REPO_LOG_LEVEL=debug -e TIMEFMT="$TIMEFMT" "$NODE" bash -c '
    D=$1; shift
    t0=$(date +%s.%N)
    "$D/time" -f "$TIMEFMT" -o "$D/preload.time" "$D/upgrade-repo" preload --iso "$D/release.iso" "$@" >"$D/preload.out" 2>"$D/preload.log" || { echo fail; exit 0; }
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" "BEGIN { printf \"%.3f\", b - a }"' _ "$D" "$@")
  c1=$(cpu_of)
  if [ "$t" = fail ]; then
    echo "bench-kind-preload: $side: preload failed:" >&2; node cat "$D/preload.out" "$D/preload.log" >&2; exit 1
  fi
  node cat "$D/preload.log" >"$work/$side.log"
  # Debug logs "direct ingest on" when the store found the content directory; "direct ingest off"
  # (info or warn) says why it streams through the content service; --direct-ingest=false logs neither.
  if grep -q 'direct ingest off' "$work/$side.log"; then ingest=content-service-fallback
  elif grep -q 'direct ingest on' "$work/$side.log"; then ingest=direct
  else ingest=content-service; fi
  # And "one-pass unpack on" when layers were extracted while written.
  if grep -q 'one-pass unpack on' "$work/$side.log"; then ingest=$ingest+one-pass; fi
  read -r rss u s <<<"$(node tail -1 "$D/preload.time")"
  res=$(check "$side" "$unpack")
  echo "$t $(awk -v a="$u" -v b="$s" 'BEGIN { printf "%.2f", a + b }') $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') $rss $res $ingest" >>"$work/$side"
  remove "$side"
}
run_ctr() {
  local side=$1 unpack=$2 c0 c1 t res secs cpu rss
  c0=$(cpu_of)
  t=$(docker exec -e TIMEFMT="$TIMEFMT" "$NODE" bash -c '
    set -o pipefail
    D=$1; unpack=$2; shift 2
    flags=(); [ "$unpack" = 1 ] || flags=(--no-unpack)
    rss=0; cpu=0
    t0=$(date +%s.%N)
    for a in "$@"; do
      "$D/time" -f "$TIMEFMT" -o "$D/zstdcat.time" "$D/zstdcat" -q "$a" \
        | "$D/time" -f "$TIMEFMT" -o "$D/ctr.time" ctr -n k8s.io images import "${flags[@]}" - >"$D/ctr.out" 2>&1 || { echo fail; exit 0; }
      read -r r1 u1 s1 < <(tail -1 "$D/zstdcat.time"); read -r r2 u2 s2 < <(tail -1 "$D/ctr.time")
      rss=$(( rss > r1 + r2 ? rss : r1 + r2 )); cpu=$(awk -v c="$cpu" -v a="$u1" -v b="$s1" -v d="$u2" -v e="$s2" "BEGIN { printf \"%.2f\", c + a + b + d + e }")
    done
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v c="$cpu" -v r="$rss" "BEGIN { printf \"%.3f %s %s\", b - a, c, r }"' _ "$D" "$unpack" "${NODE_ARCHIVES[@]}")
  c1=$(cpu_of)
  if [ "$t" = fail ]; then echo "bench-kind-preload: $side: ctr import failed:" >&2; node cat "$D/ctr.out" >&2; exit 1; fi
  read -r secs cpu rss <<<"$t"
  res=$(check "$side" "$unpack")
  echo "$secs $cpu $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') $rss $res -" >>"$work/$side"
  remove "$side"
}
run_floor() {
  local t
  t=$(docker exec -e TIMEFMT="$TIMEFMT" "$NODE" bash -c '
    D=$1; shift
    mkdir -p "$D/floor"; i=0; cpu=0
    t0=$(date +%s.%N)
    for a in "$@"; do
      "$D/time" -f "$TIMEFMT" -o "$D/zstd.time" "$D/zstd" -q -d "$a" -o "$D/floor/$i.tar" || { echo fail; exit 0; }
      read -r r u s < <(tail -1 "$D/zstd.time"); cpu=$(awk -v c="$cpu" -v a="$u" -v b="$s" "BEGIN { printf \"%.2f\", c + a + b }")
      i=$((i + 1))
    done
    sync "$D"/floor/*.tar
    t1=$(date +%s.%N)
    rm -rf "$D/floor"; sync
    awk -v a="$t0" -v b="$t1" -v c="$cpu" "BEGIN { printf \"%.3f %s\", b - a, c }"' _ "$D" "${NODE_ARCHIVES[@]}")
  [ "$t" != fail ] || { echo "bench-kind-preload: floor: zstd failed" >&2; exit 1; }
  echo "$t 0 0 0 0 0 0 -" >>"$work/floor"
}

sides=(preload preload-containerd preload-service ctr floor)
[ "$NOUNPACK" = 1 ] && sides+=(preload-nounpack preload-service-nounpack ctr-nounpack)
# Every side reads the ISO and the archives from the page cache.
node sh -c "cat $D/release.iso ${NODE_ARCHIVES[*]} >/dev/null"
for round in $(seq 1 "$ROUNDS"); do
  order=("${sides[@]}")
  [ $((round % 2)) -eq 0 ] && mapfile -t order < <(printf '%s\n' "${sides[@]}" | tac)
  for side in "${order[@]}"; do
    echo "bench-kind-preload: round $round of $ROUNDS: $side" >&2
    case $side in
    preload) run_preload "$side" 1 ;;
    preload-containerd) run_preload "$side" 1 --one-pass=false ;;
    preload-service) run_preload "$side" 1 --direct-ingest=false ;;
    preload-nounpack) run_preload "$side" 0 --unpack=false ;;
    preload-service-nounpack) run_preload "$side" 0 --unpack=false --direct-ingest=false ;;
    ctr) run_ctr "$side" 1 ;;
    ctr-nounpack) run_ctr "$side" 0 ;;
    floor) run_floor ;;
    esac
  done
done

# best COLUMN SIDE: field COLUMN of the side's fastest run; maxcol COLUMN SIDE: its largest value.
best() { sort -n -k1,1 "$work/$2" | head -1 | awk -v c="$1" '{ print $c }'; }
maxcol() { awk -v c="$1" 'BEGIN { m = 0 } $c > m { m = $c } END { print m }' "$work/$2"; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "bench-kind-preload: runs (seconds command-cpu containerd-cpu peak-RSS-KiB images unpacked blobs-added bytes-added ingest):" >&2
for side in "${sides[@]}"; do sed "s/^/  $side /" "$work/$side" >&2; done

# The release's blobs the node held before any run (shared with its own images): no side wrote them.
mapfile -t shared < <(comm -12 "$work/blobs" "$work/content0")
SHARED_BYTES=$(bytes_of "${shared[@]}")
SHARED_SNAPSHOTS=$(awk '{ print $2 }' "$work/tops" | sort -u | comm -12 - "$work/snapshots0" | grep -c . || true)
floor=$(best 1 floor)
ctr_s=$(best 1 ctr)
echo
echo "Kubernetes $VERSION release in kind node $NODE ($NODE_IMAGE, containerd $CONTAINERD_VERSION, /var/lib/containerd on $NODE_FS, /tmp on $TMP_FS):"
echo "  ${#ARCHIVES[@]} archive(s), $ARCHIVE_BYTES bytes of zstd, $TAR_BYTES bytes of tar, ${#REFS[@]} images; $(grep -c . "$work/blobs") blobs, ${#shared[@]} of them ($SHARED_BYTES bytes) and $SHARED_SNAPSHOTS top snapshot(s) already on the node"
echo
printf '  %-24s %9s %11s %8s %8s %10s %10s %10s %9s %s\n' side seconds 'MiB/s tar' '/ ctr' '/ floor' 'CPU cmd' 'CPU ctrd' 'RSS MiB' 'written' ingest
lines=()
for side in "${sides[@]}"; do
  s=$(best 1 "$side")
  case $side in *-nounpack) base=$(best 1 ctr-nounpack) ;; *) base=$ctr_s ;; esac
  key=${side//-/_}
  printf '  %-24s %9s %11s %8s %8s %10s %10s %10s %9s %s\n' "$side" "$s" "$(mbps "$TAR_BYTES" "$s")" "$(ratio "$s" "$base")" \
    "$(ratio "$s" "$floor")" "$(best 2 "$side")" "$(best 3 "$side")" "$(( $(maxcol 4 "$side") / 1024 ))" "$(best 8 "$side")" "$(best 9 "$side")"
  lines+=("${key}_seconds=$s" "${key}_mib_per_second=$(mbps "$TAR_BYTES" "$s")" "${key}_over_floor=$(ratio "$s" "$floor")")
  [ "$side" = floor ] && continue
  lines+=("${key}_over_ctr=$(ratio "$s" "$base")" "${key}_cpu_seconds=$(best 2 "$side")" "${key}_containerd_cpu_seconds=$(best 3 "$side")"
    "${key}_peak_rss_bytes=$(( $(maxcol 4 "$side") * 1024 ))" "${key}_bytes_written=$(best 8 "$side")")
  case $side in preload*) lines+=("${key}_ingest=$(best 9 "$side")") ;; esac
done
echo "  (best of $ROUNDS; / ctr: against ctr import with the same unpacking; written: bytes of the blobs the run added)"
direct=$(best 1 preload); service=$(best 1 preload-service)
echo "  direct ingest: ${direct}s, through the content service: ${service}s ($(ratio "$service" "$direct")x)"
if [ "$NOUNPACK" = 1 ]; then
  direct_nu=$(best 1 preload-nounpack); service_nu=$(best 1 preload-service-nounpack)
  echo "  --unpack=false: direct ingest ${direct_nu}s, through the content service ${service_nu}s ($(ratio "$service_nu" "$direct_nu")x)"
  echo "  unpacking in one pass: $(ratio "$direct" "$direct_nu")x --unpack=false; containerd unpacking: $(ratio "$(best 1 preload-containerd)" "$direct_nu")x"
  lines+=("preload_service_nounpack_over_direct=$(ratio "$service_nu" "$direct_nu")"
    "preload_over_nounpack=$(ratio "$direct" "$direct_nu")" "preload_containerd_over_nounpack=$(ratio "$(best 1 preload-containerd)" "$direct_nu")")
fi
if [ "$(best 9 preload)" != direct ]; then echo "  note: the default preload took the $(best 9 preload) path, not direct ingest" >&2; fi
echo
printf '%s\n' "rounds=$ROUNDS" "kubernetes=$VERSION" "node_image=$NODE_IMAGE" "containerd=$CONTAINERD_VERSION" \
  "archive_bytes=$ARCHIVE_BYTES" "tar_bytes=$TAR_BYTES" "images=${#REFS[@]}" "shared_blobs=${#shared[@]}" "shared_bytes=$SHARED_BYTES" \
  "load_average=$(cut -d' ' -f1 /proc/loadavg)" "${lines[@]}" "preload_service_over_direct=$(ratio "$service" "$direct")"
