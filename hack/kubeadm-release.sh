#!/usr/bin/env bash
# kubeadm-release.sh OUT_DIR: builds the release ISO of a kubeadm cluster (`make release-kubeadm`)
# from local artifacts, with `upgrade-repo release pack --spec`:
#   - the images `kubeadm config images list` names for the version (kube-apiserver,
#     kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS, pause), saved from the
#     local docker engine into one zstd archive, bundle/kubernetes/images/kubernetes-images-VERSION.tar.zst,
#     with its image list;
#   - kubeadm, kubelet and kubectl under kubernetes/linux-amd64/ with their SHA256SUMS;
#   - harvester-release.yaml naming the version as the release's (harvester and kubernetes), and
#     the etcd and CoreDNS image tags (etcd, coredns).
# It writes OUT_DIR/release.iso, OUT_DIR/release.json (what release pack built, image digests
# included), OUT_DIR/spec.yaml and OUT_DIR/release.env (version, sha512).
# env: K8S_WORK (a ../shared/tools/kind-offline.sh WORK directory: its required-images.txt and
#      bin/), or IMAGES (a file of image references, one a line) and BIN_DIR (kubeadm, kubelet,
#      kubectl); K8S_VERSION (default: the kube-apiserver image's tag); UPGRADE_REPO (the binary,
#      default bin/upgrade-repo, built when missing); RELEASE_VERSION (the release's own version,
#      default the Kubernetes version); BAD_COMPONENT (a control-plane image, e.g. kube-apiserver,
#      replaced by one whose binary exits at once: a release built to fail on its first node).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: kubeadm-release.sh OUT_DIR}
work=${K8S_WORK:-}
images=${IMAGES:-${work:+$work/required-images.txt}}
bin_dir=${BIN_DIR:-${work:+$work/bin}}
[ -n "$images" ] && [ -s "$images" ] || { echo "kubeadm-release: set K8S_WORK or IMAGES (a list of image references)" >&2; exit 2; }
[ -n "$bin_dir" ] || { echo "kubeadm-release: set K8S_WORK or BIN_DIR" >&2; exit 2; }
mapfile -t refs < <(grep -v '^\s*\(#\|$\)' "$images")
tag_of() { local r; for r in "${refs[@]}"; do case $r in */"$1":*) echo "${r##*:}"; return;; esac; done; }
version=${K8S_VERSION:-$(tag_of kube-apiserver)}
version=v${version#v}
etcd=$(tag_of etcd)
coredns=$(tag_of coredns)
[ -n "$etcd" ] && [ -n "$coredns" ] || { echo "kubeadm-release: $images names no etcd or coredns image" >&2; exit 2; }
for b in kubeadm kubelet kubectl; do
  [ -x "$bin_dir/$b" ] || { echo "kubeadm-release: $bin_dir/$b is missing" >&2; exit 2; }
done
have=$("$bin_dir/kubeadm" version -o short)
[ "$have" = "$version" ] || { echo "kubeadm-release: $bin_dir/kubeadm is $have, the images are $version" >&2; exit 2; }
upgrade_repo=${UPGRADE_REPO:-bin/upgrade-repo}
[ -x "$upgrade_repo" ] || make -s build >/dev/null

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/bin"
retag=""
release_version=${RELEASE_VERSION:-$version}
if [ -n "${BAD_COMPONENT:-}" ]; then
  bad_ref=""
  for i in "${!refs[@]}"; do
    case ${refs[$i]} in */"$BAD_COMPONENT":*) bad_ref=${refs[$i]}; refs[i]=local/bad-$BAD_COMPONENT:$version;; esac
  done
  [ -n "$bad_ref" ] || { echo "kubeadm-release: BAD_COMPONENT=$BAD_COMPONENT names no image of $images" >&2; exit 2; }
  mkdir -p "$stage/bad"
  (cd e2e && CGO_ENABLED=0 go build -o "$stage/bad/$BAD_COMPONENT" ./badcomponent)
  printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$BAD_COMPONENT" "$BAD_COMPONENT" "$BAD_COMPONENT" > "$stage/bad/Dockerfile"
  builder=()
  docker buildx version >/dev/null 2>&1 || builder=(env DOCKER_BUILDKIT=0)
  out_build=$("${builder[@]}" docker build -q -t "local/bad-$BAD_COMPONENT:$version" "$stage/bad" 2>&1) || { echo "kubeadm-release: docker build of the bad $BAD_COMPONENT: $out_build" >&2; exit 1; }
  retag="    retag: {\"local/bad-$BAD_COMPONENT:$version\": \"$bad_ref\"}"
fi
docker save -o "$stage/images.tar" "${refs[@]}"
for b in kubeadm kubelet kubectl; do cp "$bin_dir/$b" "$stage/bin/$b"; done
(cd "$stage/bin" && sha256sum kubeadm kubelet kubectl > SHA256SUMS)
cat > "$out/spec.yaml" <<SPEC
# The release of a kubeadm cluster at Kubernetes $version (hack/kubeadm-release.sh).
version: $release_version
noBoot: true
release:
  harvester: $release_version
  kubernetes: $version
  etcd: "$etcd"
  coredns: "$coredns"
  os: "kubeadm $version"
  minUpgradableVersion: ""
archives:
  - group: common
    name: kubernetes-images-$version
    dir: kubernetes
    tarballs: [$stage/images.tar]
$retag
files:
  - {path: kubernetes/linux-amd64/kubeadm, source: $stage/bin/kubeadm}
  - {path: kubernetes/linux-amd64/kubelet, source: $stage/bin/kubelet}
  - {path: kubernetes/linux-amd64/kubectl, source: $stage/bin/kubectl}
  - {path: kubernetes/linux-amd64/SHA256SUMS, source: $stage/bin/SHA256SUMS}
SPEC
"$upgrade_repo" release pack --spec "$out/spec.yaml" --out "$out/release.iso" -o json > "$out/release.json.tmp"
mv "$out/release.json.tmp" "$out/release.json"
{
  echo "release_version=$release_version"
  echo "kubernetes=$version"
  echo "etcd=$etcd"
  echo "coredns=$coredns"
  echo "sum=$(sha512sum "$out/release.iso" | cut -d' ' -f1)"
} > "$out/release.env"
rm -rf "$stage"
echo "kubeadm-release: $out/release.iso: Kubernetes $version (etcd $etcd, CoreDNS $coredns), $(stat -c %s "$out/release.iso") bytes" >&2
