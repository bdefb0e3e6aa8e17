#!/usr/bin/env bash
# Builds the project's three container images without Docker or a registry, as OCI image
# archives that `ctr -n k8s.io images import` loads (the tests' node imports them from here):
#
#   temporal-worker-controller.oci.tar  docker.io/library/temporal-worker-controller:<version>
#                                       (Dockerfile)
#   example-worker.oci.tar              docker.io/twc/example-worker:<version>
#                                       (examples/worker/Dockerfile)
#   pause.oci.tar                       localhost/twc/pause:3.10, the pods' sandbox
#                                       (hack/image/pause.c, static)
#
# hack/image/build.py takes each image's configuration from its Dockerfile's runtime stage and
# reproduces that stage's base, gcr.io/distroless/cc-debian12:nonroot, from Debian packages,
# which `apt-get download` fetches once into a cache outside the clone
# (${TWC_CACHE_DIR:-~/.cache/twc-rs}/debs, keyed by version). The same binaries and packages
# give the same archives, byte for byte (timestamps: $SOURCE_DATE_EPOCH, default 0).
#
#   hack/image.sh                   release binaries: what users get (a long build with LTO)
#   hack/image.sh --profile dev     the debug binaries the tests build (much faster)
#   hack/image.sh --no-build        the binaries the caller has just built in target/<profile>
#                                   (hack/demo.sh builds them with the demo, in one build)
#   hack/image.sh --out DIR         where the archives go (default $TWC_IMAGES_DIR, else
#                                   ${CARGO_TARGET_DIR:-target}/images, where the tests look)
#   hack/image.sh --check           builds nothing: checks that the Dockerfiles parse, that
#                                   build.py understands their runtime stages, and that their
#                                   ARG RUST_VERSION equals rust-toolchain.toml's channel
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { printf 'image: FAILED: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed ($2)"; }

profile=release
target=${CARGO_TARGET_DIR:-target}
out=${TWC_IMAGES_DIR:-$target/images}
check=false
compile=true
while [ "$#" -gt 0 ]; do
  case "$1" in
    --profile) [ "$#" -ge 2 ] || die "--profile needs release or dev"; profile=$2; shift 2 ;;
    --profile=*) profile=${1#*=}; shift ;;
    --out) [ "$#" -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --check) check=true; shift ;;
    --no-build) compile=false; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see hack/image.sh --help)" ;;
  esac
done
case "$profile" in
  release) bin_dir=$target/release ;;
  dev) bin_dir=$target/debug ;;
  *) die "--profile is release or dev, not '$profile'" ;;
esac

need python3 "hack/image/build.py runs on it"
build=(python3 hack/image/build.py)
dockerfiles=(Dockerfile examples/worker/Dockerfile)

if $check; then
  for f in "${dockerfiles[@]}"; do
    "${build[@]}" --check --dockerfile "$f" --toolchain rust-toolchain.toml ||
      die "$f: see the line above"
  done
  exit 0
fi

need dpkg-deb "build.py unpacks the base's Debian packages with it"
need apt-get "the base's Debian packages are fetched with apt-get download"
need gcc "the pause image's binary is compiled with it (and libc6-dev, for -static)"
need cargo "the binaries are built with it"
t0=$(date +%s)

# --- the binaries ----------------------------------------------------------------------------
locked=()
[ "$profile" = release ] && locked=(--locked)  # as the Dockerfiles build them
if $compile; then
  cargo build -q --profile "$profile" "${locked[@]}" \
    -p temporal-worker-controller -p twc-example-worker --bin twc --bin twc-example-worker ||
    die "cargo build --profile $profile failed (see above)"
fi
twc=$bin_dir/twc
worker=$bin_dir/twc-example-worker
for b in "$twc" "$worker"; do [ -x "$b" ] || die "no $b after cargo build"; done

# The images' tags: the packages' versions.
read -r twc_version worker_version < <(cargo metadata -q --no-deps --format-version 1 | python3 -c '
import json, sys
v = {p["name"]: p["version"] for p in json.load(sys.stdin)["packages"]}
print(v["temporal-worker-controller"], v["twc-example-worker"])') ||
  die "cargo metadata did not give the packages' versions"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -static -Os -s -Wall -Wextra -Werror -o "$tmp/pause" hack/image/pause.c ||
  die "compiling hack/image/pause.c failed (static linking needs libc6-dev)"

# --- the base's Debian packages, cached by version -------------------------------------------
debs=${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc-rs}/debs
mkdir -p "$debs"
apt_opts=()
# As root, apt drops to _apt to download, which may not write to the cache: stay root.
[ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root)

# The cached .deb of the version apt would install now, if there is one.
cached_deb() {
  local v f
  v=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^  Candidate: //p')
  [ -n "$v" ] && [ "$v" != "(none)" ] || return 1
  for f in "$debs/${1}_${v//:/%3a}_"*.deb; do
    [ -f "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}
download() { (cd "$debs" && apt-get download -q "${apt_opts[@]}" "$1"); }

deb_args=()
while read -r pkg; do
  if ! deb=$(cached_deb "$pkg"); then
    if ! download "$pkg"; then
      echo "image: apt-get download $pkg failed; running apt-get update and trying again" >&2
      apt-get update -q || die "apt-get update failed (as root, with Debian's package servers reachable)"
      download "$pkg" || die "apt-get download $pkg failed (see above)"
    fi
    deb=$(cached_deb "$pkg") || die "apt-get download $pkg left no ${pkg}_<candidate version>_*.deb in $debs"
  fi
  deb_args+=(--deb "$deb")
done < <("${build[@]}" --list-packages)

# --- the images ------------------------------------------------------------------------------
commit=$(git rev-parse HEAD 2>/dev/null || true)
mkdir -p "$out"
"${build[@]}" --dockerfile Dockerfile --binary "$twc" --revision "$commit" "${deb_args[@]}" \
  --name "docker.io/library/temporal-worker-controller:$twc_version" \
  --out "$out/temporal-worker-controller.oci.tar" || die "the controller's image (see above)"
"${build[@]}" --dockerfile examples/worker/Dockerfile --binary "$worker" --revision "$commit" \
  "${deb_args[@]}" --name "docker.io/twc/example-worker:$worker_version" \
  --out "$out/example-worker.oci.tar" || die "the example worker's image (see above)"
"${build[@]}" --pause --binary "$tmp/pause" --revision "$commit" \
  --name localhost/twc/pause:3.10 --out "$out/pause.oci.tar" || die "the pause image (see above)"
echo "image: 3 archives in $out ($profile binaries, $(( $(date +%s) - t0 ))s)"
