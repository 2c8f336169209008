#!/bin/bash -e
# upgrade-step: the e2e's stand-in for the product's upgrade scripts (Harvester's package/upgrade/
# lib.sh, upgrade_manifests.sh and upgrade_node.sh), run by the sequencer as a plan's upgrade image
# in compatibility mode. It makes the requests those scripts make, with their tools and flags, at
# the URL they derive from the upgrade's name:
#   cluster step (UPGRADE_STEP=cluster): wait_repo (the Deployment upgrade-repo-<upgrade> Available,
#     then `curl -sfL` of harvester-release.yaml), detect_repo (download_file, i.e. `curl -sSfL URL -o
#     FILE --create-dirs`, and the 15 keys read with `yq -e`), the bundle metadata read with
#     `yq -e -o=json | jq -r ... @tsv` and every image list, and the product controller's GETs of
#     harvester-release.yaml and images-lists-archive/{previous,current}/image_list_all.txt, under
#     /harvester-iso/ and under /;
#   node step (UPGRADE_STEP=node): detect_repo, import_image_archives_from_repo for every group
#     (`curl -fL BUNDLE//ARCHIVE | zstdcat | ctr -n k8s.io images import --no-unpack -` through the
#     node's containerd under /host), the download of rootfs.squashfs with --create-dirs, and
#     `curl` without -L on a // path.
# Every request and its outcome goes to requests.tsv, which it leaves in the ConfigMap
# e2e-compat-<step>[-<node>] of its own namespace (the sequencer deletes the Jobs, and their logs,
# at CleaningUp); it exits non-zero when a request the scripts need failed. The node step never
# reboots; it still keeps the reboot contract of the upgrade image (README): a run that finds its
# record from an earlier run of the same plan exits 0 without redoing the work.
set -o pipefail

# As lib.sh: the repo is found by the upgrade's name; any UPGRADE_REPO_URL given is overwritten.
UPGRADE_NAMESPACE="harvester-system"
UPGRADE_REPO_URL=http://upgrade-repo-$HARVESTER_UPGRADE_NAME.$UPGRADE_NAMESPACE/harvester-iso
UPGRADE_REPO_DEPLOYMENT="upgrade-repo-$HARVESTER_UPGRADE_NAME"
UPGRADE_REPO_RELEASE_FILE="$UPGRADE_REPO_URL/harvester-release.yaml"
UPGRADE_REPO_SQUASHFS_IMAGE="$UPGRADE_REPO_URL/rootfs.squashfs"
UPGRADE_REPO_BUNDLE_ROOT="$UPGRADE_REPO_URL/bundle"
UPGRADE_REPO_BUNDLE_METADATA="$UPGRADE_REPO_URL/bundle/metadata.yaml"
# The upgrade-toolkit prototype serves the ISO at the root of its repo Service.
UPGRADE_REPO_ROOT_URL=http://upgrade-repo-$HARVESTER_UPGRADE_NAME.$UPGRADE_NAMESPACE
HOST_DIR="${HOST_DIR:-/host}"
STEP=${UPGRADE_STEP:?UPGRADE_STEP is not set}
WORK=$(mktemp -d)
RESULTS=$WORK/requests.tsv
FAILED=0

# record WHAT COMMAND URL OUTCOME DETAIL: one request and its outcome.
record() {
  local detail=${5//$'\n'/ }
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${detail//$'\t'/ }" | tee -a "$RESULTS" >&2
  [ "$4" != FAILED ] || FAILED=1
}

# publish leaves requests.tsv in a ConfigMap for the test, whatever happened.
publish() {
  local ns name
  ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace) || { echo "no service account: results not published" >&2; return 0; }
  name=e2e-compat-$STEP
  [ "$STEP" = node ] && name=$name-$HARVESTER_UPGRADE_NODE_NAME
  touch "$RESULTS"
  kubectl -n "$ns" create configmap "$name" --from-file=requests.tsv="$RESULTS" \
    --from-literal=plan="$HARVESTER_UPGRADE_NAME" --from-literal=failed="$FAILED" --dry-run=client -o yaml |
    kubectl label --local -f - -o yaml e2e-compat="$HARVESTER_UPGRADE_NAME" |
    kubectl apply -f - >/dev/null || echo "publishing the results in configmap $ns/$name failed" >&2
}
trap 'publish; rm -rf "$WORK"' EXIT

# download_file URL OUTPUT: as lib.sh (curl -sSfL ... --create-dirs, retried).
download_file() {
  local url=$1 output=$2 i=0 out
  while [ "$i" -lt 30 ]; do
    if out=$(curl -sSfL "$url" -o "$output" --create-dirs -w '%{http_code} %{size_download}'); then
      record download_file "curl -sSfL URL -o FILE --create-dirs" "$url" ok "$out $(sha256sum "$output" | cut -c1-64)"
      return 0
    fi
    i=$((i + 1))
    sleep 2
  done
  record download_file "curl -sSfL URL -o FILE --create-dirs" "$url" FAILED "$out after $i attempts"
  return 1
}

# wait_repo: as lib.sh since v1.7, the repo's Deployment first, then the release file.
wait_repo() {
  local out
  if out=$(kubectl -n "$UPGRADE_NAMESPACE" wait --for=condition=Available "deployment/$UPGRADE_REPO_DEPLOYMENT" --timeout=5m 2>&1); then
    record wait_repo "kubectl wait --for=condition=Available" "deployment/$UPGRADE_REPO_DEPLOYMENT" ok \
      "$out; replicas $(kubectl -n "$UPGRADE_NAMESPACE" get "deployment/$UPGRADE_REPO_DEPLOYMENT" -o jsonpath='{.spec.replicas}/{.status.availableReplicas}')"
  else
    record wait_repo "kubectl wait --for=condition=Available" "deployment/$UPGRADE_REPO_DEPLOYMENT" FAILED "$out"
  fi
  if out=$(kubectl -n "$UPGRADE_NAMESPACE" rollout status "deployment/$UPGRADE_REPO_DEPLOYMENT" --timeout=2m 2>&1); then
    record wait_repo "kubectl rollout status" "deployment/$UPGRADE_REPO_DEPLOYMENT" ok "$out"
  else
    record wait_repo "kubectl rollout status" "deployment/$UPGRADE_REPO_DEPLOYMENT" FAILED "$out"
  fi
  local i=0
  until curl -sfL "$UPGRADE_REPO_RELEASE_FILE" -o /dev/null; do
    i=$((i + 1))
    if [ "$i" -ge 60 ]; then
      record wait_repo "curl -sfL" "$UPGRADE_REPO_RELEASE_FILE" FAILED "not ready after $i attempts"
      return 1
    fi
    echo "Wait for upgrade repo ready..." >&2
    sleep 5
  done
  record wait_repo "curl -sfL" "$UPGRADE_REPO_RELEASE_FILE" ok "ready after $i retries"
}

# detect_repo: as lib.sh, the 15 keys read with yq -e (a missing one stops the upgrade under
# bash -e), minUpgradableVersion without -e, then the bundle metadata.
RELEASE_KEYS=(.harvester .harvesterChart .os .kubernetes .rancher .monitoringChart .loggingChart
  .loggingChartHarvesterEventRouter .rancherDependencies.fleet.chart .rancherDependencies.fleet.app
  .rancherDependencies.fleet-crd.chart .rancherDependencies.fleet-crd.app
  .rancherDependencies.rancher-webhook.chart .rancherDependencies.rancher-webhook.app .kubevirt)
detect_repo() {
  local release_file key value
  release_file=$(mktemp --suffix=.yaml -p "$WORK")
  download_file "$UPGRADE_REPO_RELEASE_FILE" "$release_file" || return 1
  for key in "${RELEASE_KEYS[@]}"; do
    if value=$(yq -e e "$key" "$release_file") && [ -n "$value" ]; then
      record release-key "yq -e e" "$key" ok "$value"
    else
      record release-key "yq -e e" "$key" FAILED "missing or empty"
    fi
  done
  value=$(yq e '.minUpgradableVersion' "$release_file")
  record release-key "yq e" .minUpgradableVersion ok "$value"
  CACHED_BUNDLE_METADATA=$(mktemp --suffix=.yaml -p "$WORK")
  download_file "$UPGRADE_REPO_BUNDLE_METADATA" "$CACHED_BUNDLE_METADATA"
}

# archives TYPE: the list and archive of every archive of a group, as lib.sh reads them.
archives() {
  yq -e -o=json e ".images.$1" "$CACHED_BUNDLE_METADATA" | jq -r '.[] | [.list, .archive] | @tsv'
}

# groups: the groups of the bundle metadata.
groups() { yq -e e '.images | keys | .[]' "$CACHED_BUNDLE_METADATA"; }

# get WHAT URL: one GET as the product's controller makes it (its Go client; curl here), with
# its status and size; a 404 is an outcome too (the release may not carry the file).
get() {
  local out
  out=$(curl -sS -o "$WORK/get" -w '%{http_code} %{size_download}' "$2") || true
  case $out in
    200\ *) record "$1" "GET" "$2" ok "$out $(sha256sum "$WORK/get" | cut -c1-64)" ;;
    404\ *) record "$1" "GET" "$2" absent "$out" ;;
    *) record "$1" "GET" "$2" FAILED "$out" ;;
  esac
}

cluster_step() {
  wait_repo
  detect_repo || exit 1
  local type list archive n
  for type in $(groups); do
    n=0
    while IFS=$'\t' read -r list archive; do
      if curl -sfL "$UPGRADE_REPO_BUNDLE_ROOT/$list" | sort > "$WORK/list"; then
        record image-list "curl -sfL" "$UPGRADE_REPO_BUNDLE_ROOT/$list" ok "$(wc -l < "$WORK/list") images"
      else
        record image-list "curl -sfL" "$UPGRADE_REPO_BUNDLE_ROOT/$list" FAILED ""
      fi
      n=$((n + 1))
    done < <(archives "$type")
    record bundle-group "yq -e -o=json e .images.$type | jq -r '.[] | [.list, .archive] | @tsv'" "$UPGRADE_REPO_BUNDLE_METADATA" ok "$type: $n archives"
  done
  # The upgrade controller's GETs, under /harvester-iso/ and at the root.
  for base in "$UPGRADE_REPO_URL" "$UPGRADE_REPO_ROOT_URL"; do
    get controller "$base/harvester-release.yaml"
    get controller "$base/bundle/harvester/images-lists-archive/current/image_list_all.txt"
    get controller "$base/bundle/harvester/images-lists-archive/$UPGRADE_PREVIOUS_VERSION/image_list_all.txt"
  done
}

node_step() {
  local done_file="$HOST_DIR/var/lib/upgrade-repo-e2e/scripts/$HARVESTER_UPGRADE_NAME.done"
  if [ -e "$done_file" ]; then
    record node-step "test -e" "$done_file" ok "done in an earlier run: nothing to redo"
    return 0
  fi
  detect_repo || exit 1

  # As lib.sh: the node's containerd and ctr under /host (RKE2's when there is one).
  export CONTAINERD_ADDRESS=$HOST_DIR/run/k3s/containerd/containerd.sock
  [ -S "$CONTAINERD_ADDRESS" ] || CONTAINERD_ADDRESS=$HOST_DIR/run/containerd/containerd.sock
  export CONTAINER_RUNTIME_ENDPOINT=unix://$CONTAINERD_ADDRESS
  CTR=ctr
  if [ -L "$HOST_DIR/var/lib/rancher/rke2/bin" ]; then
    CTR="$HOST_DIR/$(readlink "$HOST_DIR/var/lib/rancher/rke2/bin")/ctr"
  fi

  local type list archive image_list_url archive_url image_list_file missing out first_list="" first_archive=""
  for type in $(groups); do
    while IFS=$'\t' read -r list archive; do
      image_list_url="$UPGRADE_REPO_BUNDLE_ROOT/$list"
      archive_url="$UPGRADE_REPO_BUNDLE_ROOT/$archive"
      image_list_file="$WORK/$(basename "$list")"
      [ -n "$first_list" ] || { first_list=$image_list_url; first_archive=$archive_url; }
      # The agents preloaded these images during ImagePreloading, so the scripts' check would
      # skip the import: remove them first, so that the import below runs as on a node nobody
      # preloaded (they are the release's own images: no pod uses them). The agent, which holds
      # the ISO, puts a removed release image back; whether it was quicker than the check below
      # is recorded, and the import runs either way, as it would on a node without an agent.
      # shellcheck disable=SC2046 # one argument per reference
      $CTR -n k8s.io images rm $(curl -sfL "$image_list_url") >/dev/null 2>&1 || true
      # As lib.sh import_image_archives_from_repo.
      curl -sfL "$image_list_url" | sort > "$image_list_file"
      missing=$($CTR -n k8s.io images ls -q | grep -v ^sha256 | sort | comm -23 "$image_list_file" -)
      if [ -z "$missing" ]; then
        record removal "ctr images ls" "$image_list_url" ok "nothing missing after the removal: the agent put them back"
      else
        record removal "ctr images ls" "$image_list_url" ok "$(echo "$missing" | wc -l) missing after the removal"
      fi
      if out=$(curl -fL "$archive_url" 2>"$WORK/curl.err" | zstdcat | $CTR -n k8s.io images import --no-unpack - 2>&1); then
        missing=$($CTR -n k8s.io images ls -q | grep -v ^sha256 | sort | comm -23 "$image_list_file" -)
        if [ -z "$missing" ]; then
          record import "curl -fL URL | zstdcat | ctr -n k8s.io images import --no-unpack -" "$archive_url" ok "$(wc -l < "$image_list_file") images present"
        else
          record import "curl -fL URL | zstdcat | ctr -n k8s.io images import --no-unpack -" "$archive_url" FAILED "still missing: $(echo $missing)"
        fi
      else
        record import "curl -fL URL | zstdcat | ctr -n k8s.io images import --no-unpack -" "$archive_url" FAILED "$(echo $out $(cat "$WORK/curl.err"))"
      fi
    done < <(archives "$type")
  done

  # The new OS image, downloaded into a directory that does not exist yet.
  download_file "$UPGRADE_REPO_SQUASHFS_IMAGE" "$WORK/upgrade_tmp/os/rootfs.squashfs"

  # Without -L a redirect would be saved as the file: a // path must answer with the file itself.
  if [ -n "$first_list" ]; then
    out=$(curl -sS -o "$WORK/nolocation" -w '%{http_code} %{size_download}' "$first_list") || true
    if [ "${out%% *}" = 200 ] && cmp -s "$WORK/nolocation" <(curl -sfL "$first_list"); then
      record double-slash "curl (no -L)" "$first_list" ok "$out $(sha256sum "$WORK/nolocation" | cut -c1-64)"
    else
      record double-slash "curl (no -L)" "$first_list" FAILED "$out"
    fi
    out=$(curl -sSI -o /dev/null -w '%{http_code} %header{content-length}' "$first_archive") || true
    if [ "${out%% *}" = 200 ]; then
      record double-slash "curl -I (no -L)" "$first_archive" ok "$out"
    else
      record double-slash "curl -I (no -L)" "$first_archive" FAILED "$out"
    fi
    out=$(curl -sS -r 0-99 -o "$WORK/range" -w '%{http_code} %{size_download}' "$first_archive") || true
    if [ "$out" = "206 100" ]; then
      record double-slash "curl -r 0-99 (no -L)" "$first_archive" ok "$out"
    else
      record double-slash "curl -r 0-99 (no -L)" "$first_archive" FAILED "$out"
    fi
  fi

  if [ "$FAILED" = 0 ]; then
    mkdir -p "$(dirname "$done_file")"
    date -u +%FT%TZ > "$done_file"
  fi
}

echo "upgrade-step: $STEP step of $HARVESTER_UPGRADE_NAME${HARVESTER_UPGRADE_NODE_NAME:+ on $HARVESTER_UPGRADE_NODE_NAME}, repo $UPGRADE_REPO_URL" >&2
case $STEP in
  cluster) cluster_step ;;
  node) node_step ;;
  *) record step "" "" FAILED "unknown UPGRADE_STEP $STEP"; exit 2 ;;
esac
[ "$FAILED" = 0 ]
