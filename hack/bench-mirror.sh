#!/usr/bin/env bash
# bench-mirror.sh: a large release image pulled on a node that lacks it, through the node's agent
# acting as containerd's registry mirror, which fetches it from a peer agent, against
# `zstdcat ARCHIVE | ctr -n k8s.io images import -` of the same image on the same node, side by
# side in one run.
#
# Two nodes on loopback, each a Debian containerd with its own root, state and socket, and a real
# `upgrade-repo agent` with --containerd-sock and --mirror-listen, joined in one gossip ring:
#   node A holds the release ISO (--iso) and has preloaded its image;
#   node B runs a small release of its own (an agent outside a cluster needs an ISO) and keeps the
#          large release's image list in its cache directory (mirror-lists/<version>.txt), as an
#          agent does once a plan of that release Succeeded and its ISO was dropped: its mirror
#          serves the release's images, which it does not hold, from its peers.
# Sides, on node B, each timed from start to the image ready:
#   mirror: ctr images pull --hosts-dir DIR REF, DIR holding the hosts.toml that
#           `upgrade-repo mirror hosts` writes for docker.io, pointing at agent B's mirror;
#   import: zstdcat ARCHIVE | ctr images import - (the archive read from the page cache).
# Both unpack into overlayfs (ctr's default on both). After each side the image is checked (its
# manifest digest is the one node A holds, whose config is the image ID the release was packed
# with; every layer unpacked), then removed with `ctr images rm --sync` and its content and
# snapshots checked gone, so every run moves every byte.
# Each side runs BENCH_ROUNDS times in alternating order; the fastest run of each counts (the
# machine is shared). Bytes moved per mirror run come from the agents' metrics: what agent B
# received from peers (upgrade_repo_registry_peer_received_bytes_total) and passed on
# (upgrade_repo_registry_sent_bytes_total{source="peer"}), what agent A sent from its store
# ({source="local"}). CPU of a run is the sum over the two containerds, the two agents and the
# commands of the side. Ends with name=value lines.
#
# The release (one archive of one image of BENCH_IMAGE_MB MiB in three layers, split 64/27/9%,
# random and so mostly incompressible) is packed once by `release pack --spec` into
# .cache/bench-mirror/<MiB>/ (the ISO and its tree, twice the image's size on disk); node B's
# small release into .cache/bench-mirror/base/. The containerd roots go under a temporary
# directory (BENCH_TMP, default $TMPDIR or /tmp), removed at the end.
#
# Knobs: BENCH_IMAGE_MB (1024), BENCH_ROUNDS (3), BENCH_TMP, BIN (bin/upgrade-repo).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/bench-lib.sh
BIN=$(realpath "${BIN:-bin/upgrade-repo}")
IMAGE_MB=${BENCH_IMAGE_MB:-1024}
ROUNDS=${BENCH_ROUNDS:-3}
CACHE=.cache/bench-mirror
REF=docker.io/rancher/bench-mirror:v1
if [ "$(id -u)" -ne 0 ]; then echo "bench-mirror: needs root (it starts containerd)" >&2; exit 1; fi
for tool in containerd ctr zstdcat xorriso curl jq bc /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench-mirror: $tool missing (make deps)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "bench-mirror: $BIN missing (make build)" >&2; exit 1; }
[ "$IMAGE_MB" -ge 3 ] || { echo "bench-mirror: BENCH_IMAGE_MB is at least 3" >&2; exit 1; }

# pack DIR SPEC: the release of the YAML SPEC packed into DIR/release.iso, its tree into DIR/tree
# and `release pack -o json` into DIR/pack.json, unless already there.
pack() {
  local dir=$1 spec=$2
  [ -s "$dir/release.iso" ] && [ -s "$dir/pack.json" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  echo "$spec" >"$dir/spec.yaml"
  echo "bench-mirror: packing $dir" >&2
  "$BIN" release pack --spec "$dir/spec.yaml" --tree "$dir/tree" --out "$dir/release.iso.tmp" -o json >"$dir/pack.json.tmp"
  mv "$dir/pack.json.tmp" "$dir/pack.json"
  mv "$dir/release.iso.tmp" "$dir/release.iso"
}
L1=$((IMAGE_MB * 64 / 100)); L2=$((IMAGE_MB * 27 / 100)); L3=$((IMAGE_MB - L1 - L2))
REL=$CACHE/$IMAGE_MB
pack "$REL" "version: v9.9.0-bench
seed: 20260101
noBoot: true
archives:
  - group: common
    name: bench-mirror
    images:
      - {ref: \"rancher/bench-mirror:v1\", layers: [${L1}MiB, ${L2}MiB, ${L3}MiB]}"
BASE=$CACHE/base
pack "$BASE" "version: v9.8.0-bench
seed: 20251231
noBoot: true
archives:
  - group: common
    name: bench-mirror-base
    images:
      - {ref: \"rancher/bench-mirror-base:v1\", layers: [256KiB]}"
VERSION=$(jq -r .Version "$REL/pack.json")
ARCHIVE=$REL/tree/$(jq -r '.Archives[0].Archive' "$REL/pack.json")
CONFIG=$(jq -r --arg ref "$REF" '.Archives[].Images[] | select(.Ref == $ref) | .ConfigDigest' "$REL/pack.json")
if [ -z "$CONFIG" ] || [ ! -s "$ARCHIVE" ]; then echo "bench-mirror: $REL/pack.json has no $REF" >&2; exit 1; fi

WORK=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/bench-mirror.XXXXXX")
AGENTS=()
DAEMONS=()
cleanup() {
  local p
  for p in "${AGENTS[@]}" "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  grep -o "$WORK/[^ ]*" /proc/mounts 2>/dev/null | sort -r | xargs -r -n1 umount 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# start_containerd NODE: a fresh daemon under $WORK/NODE, its socket $WORK/NODE/c.sock; its pid
# is appended to DAEMONS.
start_containerd() {
  containerd_run "$WORK/$1"
  DAEMONS+=("$containerd_pid")
  containerd_wait "$WORK/$1" "bench-mirror: containerd of $1"
}

# metric URL NAME: the sum of the samples of metric NAME (any labels, or the labels NAME gives)
# at URL.
metric() { curl -fs "$1" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f\n", s }'; }
# cpu PID...: the CPU seconds (user + system) the live processes PID... spent so far.
cpu() { local p; for p in "$@"; do proc "$p" | awk '{ print $2 }'; done | awk '{ s += $1 } END { printf "%.2f\n", s }'; }
# timed_cpu FILE: the CPU seconds /usr/bin/time -f '%U %S' wrote into FILE.
timed_cpu() { tail -1 "$1" | awk '{ printf "%.2f\n", $1 + $2 }'; }
# status URL PATTERN: waits up to 10 minutes for the agent's /v1/status to match PATTERN.
status() {
  local deadline=$(($(date +%s) + 600))
  until curl -fs "$1/v1/status" 2>/dev/null | grep -q "$2"; do
    [ "$(date +%s)" -lt "$deadline" ] || {
      echo "bench-mirror: $1/v1/status never matched $2:" >&2; curl -fs "$1/v1/status" >&2 || true
      tail -n 20 "$WORK"/agent-*.log >&2; exit 1
    }
    sleep 0.2
  done
}

start_containerd a
start_containerd b
SOCK_A=$WORK/a/c.sock
SOCK_B=$WORK/b/c.sock
HTTP_A=127.0.0.1:$(pick_port); GOSSIP_A=127.0.0.1:$(pick_port); MIRROR_A=127.0.0.1:$(pick_port)
HTTP_B=127.0.0.1:$(pick_port); GOSSIP_B=127.0.0.1:$(pick_port); MIRROR_B=127.0.0.1:$(pick_port)

# Node B's agent keeps the large release's image list as an agent that preloaded it writes it.
mkdir -p "$WORK/b/cache/mirror-lists"
jq -r '.Archives[].Images[].Ref' "$REL/pack.json" >"$WORK/b/cache/mirror-lists/$VERSION.txt"
"$BIN" agent --node-name bench-a --listen "$HTTP_A" --gossip-listen "$GOSSIP_A" --cache-dir "$WORK/a/cache" \
  --iso "$REL/release.iso" --containerd-sock "$SOCK_A" --unpack=false --mirror-listen "$MIRROR_A" >"$WORK/agent-a.log" 2>&1 &
AGENTS+=($!)
AGENT_A=$!
"$BIN" agent --node-name bench-b --listen "$HTTP_B" --gossip-listen "$GOSSIP_B" --join "$GOSSIP_A" --cache-dir "$WORK/b/cache" \
  --iso "$BASE/release.iso" --containerd-sock "$SOCK_B" --mirror-listen "$MIRROR_B" >"$WORK/agent-b.log" 2>&1 &
AGENTS+=($!)
AGENT_B=$!
echo "bench-mirror: waiting for agent A to preload $REF and for both agents to join" >&2
status "http://$HTTP_A" '"state": "ImagePreloaded"'
status "http://$HTTP_A" '"members": 2'
status "http://$HTTP_B" '"state": "ImagePreloaded"'
status "http://$HTTP_B" '"members": 2'
"$BIN" mirror hosts --config-dir "$WORK/certs.d" --mirror "http://$MIRROR_B" --registries docker.io 2>/dev/null

# digest SOCK: the manifest digest of $REF in the containerd at SOCK (empty when it has none).
digest() { ctr -a "$1" -n k8s.io images ls | awk -v r="$REF" '$1 == r { print $3 }'; }
# The manifest node A's preload wrote is the one to find on node B after either side: its config
# is the image's (the image ID the release was packed with).
WANT=$(digest "$SOCK_A")
[ -n "$WANT" ] || { echo "bench-mirror: node A lacks $REF after its preload" >&2; exit 1; }
got=$(ctr -a "$SOCK_A" -n k8s.io content get "$WANT" | jq -r .config.digest)
[ "$got" = "$CONFIG" ] || { echo "bench-mirror: node A holds $REF with config $got, want $CONFIG" >&2; exit 1; }
[ -z "$(digest "$SOCK_B")" ] || { echo "bench-mirror: node B holds $REF before the first run" >&2; exit 1; }
# The image's blobs (manifest, config, layers) and their bytes, from node A's copy.
BLOBS=$( (echo "$WANT"; ctr -a "$SOCK_A" -n k8s.io content get "$WANT" | jq -r '.config.digest, .layers[].digest') | sort -u)
LAYERS=$(ctr -a "$SOCK_A" -n k8s.io content get "$WANT" | jq '.layers | length')
# BLOB_BYTES are the config's and the layers' (what the registry counts as sent), IMAGE_BYTES the
# manifest's too.
BLOB_BYTES=$(ctr -a "$SOCK_A" -n k8s.io content get "$WANT" | jq '.config.size + ([.layers[].size] | add)')
IMAGE_BYTES=$((BLOB_BYTES + $(ctr -a "$SOCK_A" -n k8s.io content get "$WANT" | wc -c)))
ARCHIVE_BYTES=$(stat -c %s "$ARCHIVE")
TAR_BYTES=$(zstdcat -q "$ARCHIVE" | wc -c)
snapshots() { ctr -a "$SOCK_B" -n k8s.io snapshots ls | tail -n +2 | grep -c . || true; }
SNAPSHOTS0=$(snapshots)

# check SIDE: the image is on node B as packed, every layer unpacked.
check() {
  local got
  got=$(digest "$SOCK_B")
  [ "$got" = "$WANT" ] || { echo "bench-mirror: $1: node B holds $REF as '$got', want $WANT" >&2; exit 1; }
  [ "$(snapshots)" -eq $((SNAPSHOTS0 + LAYERS)) ] || {
    echo "bench-mirror: $1: node B has $(snapshots) snapshots, want $((SNAPSHOTS0 + LAYERS)) (the image unpacked)" >&2; exit 1
  }
}
# remove: removes the image from node B and checks its blobs and snapshots are gone.
remove() {
  local left
  ctr -a "$SOCK_B" -n k8s.io images rm --sync "$REF" >/dev/null
  left=$(ctr -a "$SOCK_B" -n k8s.io content ls -q | grep -cxF "$BLOBS" || true)
  if [ "$left" -ne 0 ] || [ "$(snapshots)" -ne "$SNAPSHOTS0" ]; then
    echo "bench-mirror: node B kept $left blob(s) and $(($(snapshots) - SNAPSHOTS0)) snapshot(s) of $REF after its removal" >&2; exit 1
  fi
}

PIDS_CPU=("${DAEMONS[@]}" "${AGENTS[@]}")
# run_mirror: "seconds cpu-seconds received-from-peers passed-on-from-peers sent-by-A" to mirror.
run_mirror() {
  local t0 t1 c0 c1 r0 r1 p0 p1 s0 s1
  r0=$(metric "http://$HTTP_B/metrics" upgrade_repo_registry_peer_received_bytes_total)
  p0=$(metric "http://$HTTP_B/metrics" 'upgrade_repo_registry_sent_bytes_total{source="peer"}')
  s0=$(metric "http://$HTTP_A/metrics" 'upgrade_repo_registry_sent_bytes_total{source="local"}')
  c0=$(cpu "${PIDS_CPU[@]}")
  t0=$(now)
  /usr/bin/time -f '%U %S' -o "$WORK/pull.time" ctr -a "$SOCK_B" -n k8s.io images pull --hosts-dir "$WORK/certs.d" "$REF" >"$WORK/pull.out" 2>&1 || {
    echo "bench-mirror: ctr images pull through the mirror failed:" >&2; tail -n 20 "$WORK/pull.out" "$WORK/agent-b.log" >&2; exit 1
  }
  t1=$(now)
  c1=$(cpu "${PIDS_CPU[@]}")
  r1=$(metric "http://$HTTP_B/metrics" upgrade_repo_registry_peer_received_bytes_total)
  p1=$(metric "http://$HTTP_B/metrics" 'upgrade_repo_registry_sent_bytes_total{source="peer"}')
  s1=$(metric "http://$HTTP_A/metrics" 'upgrade_repo_registry_sent_bytes_total{source="local"}')
  check mirror
  [ $((p1 - p0)) -eq "$BLOB_BYTES" ] || {
    echo "bench-mirror: mirror: agent B passed on $((p1 - p0)) bytes from peers, the image's blobs are $BLOB_BYTES" >&2; exit 1
  }
  echo "$(elapsed "$t0" "$t1") $(awk -v a="$c0" -v b="$c1" -v c="$(timed_cpu "$WORK/pull.time")" 'BEGIN { printf "%.2f", b - a + c }') \
$((r1 - r0)) $((p1 - p0)) $((s1 - s0))" >>"$WORK/mirror"
  remove
}
# run_import: "seconds cpu-seconds" to import.
run_import() {
  local t0 t1 c0 c1
  c0=$(cpu "${PIDS_CPU[@]}")
  t0=$(now)
  /usr/bin/time -f '%U %S' -o "$WORK/zstdcat.time" zstdcat -q "$ARCHIVE" \
    | /usr/bin/time -f '%U %S' -o "$WORK/import.time" ctr -a "$SOCK_B" -n k8s.io images import - >"$WORK/import.out" 2>&1
  t1=$(now)
  c1=$(cpu "${PIDS_CPU[@]}")
  check import
  echo "$(elapsed "$t0" "$t1") $(awk -v a="$c0" -v b="$c1" -v c="$(timed_cpu "$WORK/zstdcat.time")" -v d="$(timed_cpu "$WORK/import.time")" \
    'BEGIN { printf "%.2f", b - a + c + d }')" >>"$WORK/import"
  remove
}

# Both sides read warm: the archive from the page cache, node A's blobs too after the first run.
cat "$ARCHIVE" >/dev/null
for round in $(seq 1 "$ROUNDS"); do
  sides=(mirror import)
  [ $((round % 2)) -eq 0 ] && sides=(import mirror)
  for side in "${sides[@]}"; do
    echo "bench-mirror: round $round of $ROUNDS: $side" >&2
    "run_$side"
  done
done
read -r RSS_B CPU_B < <(proc "$AGENT_B")
read -r RSS_A CPU_A < <(proc "$AGENT_A")

best() { sort -n -k1,1 "$2" | head -1 | awk -v c="$1" '{ print $c }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mibps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
echo "bench-mirror: runs (seconds cpu-seconds [bytes received from peers, passed on from peers, sent by node A]):" >&2
sed 's/^/  mirror /' "$WORK/mirror" >&2
sed 's/^/  import /' "$WORK/import" >&2
M=$(best 1 "$WORK/mirror"); M_CPU=$(best 2 "$WORK/mirror"); M_RECV=$(best 3 "$WORK/mirror"); M_PEER=$(best 4 "$WORK/mirror"); M_SENT=$(best 5 "$WORK/mirror")
I=$(best 1 "$WORK/import"); I_CPU=$(best 2 "$WORK/import")
cat <<EOF

$REF: $IMAGE_BYTES bytes in $LAYERS layers (manifest $WANT); archive $ARCHIVE_BYTES bytes of zstd, $TAR_BYTES bytes of tar
both sides unpack into overlayfs (ctr images pull and ctr images import, their defaults)
  mirror (ctr images pull on node B through agent B, from agent A): ${M}s (best of $ROUNDS), $(mibps "$IMAGE_BYTES" "$M") MiB/s, CPU ${M_CPU}s
    agent B received $M_RECV bytes from peers and passed on $M_PEER; agent A sent $M_SENT
  import (zstdcat ARCHIVE | ctr images import - on node B):        ${I}s (best of $ROUNDS), $(mibps "$IMAGE_BYTES" "$I") MiB/s, CPU ${I_CPU}s
    read $ARCHIVE_BYTES bytes of archive
  mirror / import $(ratio "$M" "$I"); import / mirror $(ratio "$I" "$M")
  agent B peak RSS ${RSS_B} MiB, CPU ${CPU_B}s in all; agent A peak RSS ${RSS_A} MiB, CPU ${CPU_A}s in all

EOF
printf '%s\n' "rounds=$ROUNDS" "load_average=$(cut -d' ' -f1 /proc/loadavg)" "unpack=true" \
  "image_bytes=$IMAGE_BYTES" "image_layers=$LAYERS" "archive_bytes=$ARCHIVE_BYTES" "tar_bytes=$TAR_BYTES" \
  "mirror_seconds=$M" "import_seconds=$I" "mirror_over_import=$(ratio "$M" "$I")" "import_over_mirror=$(ratio "$I" "$M")" \
  "mirror_cpu_seconds=$M_CPU" "import_cpu_seconds=$I_CPU" \
  "mirror_peer_received_bytes=$M_RECV" "mirror_peer_passed_on_bytes=$M_PEER" "mirror_peer_sent_bytes=$M_SENT" \
  "import_archive_bytes=$ARCHIVE_BYTES" \
  "agent_b_peak_rss_bytes=$(awk -v m="$RSS_B" 'BEGIN { printf "%.0f", m * 1048576 }')" \
  "agent_a_peak_rss_bytes=$(awk -v m="$RSS_A" 'BEGIN { printf "%.0f", m * 1048576 }')"
