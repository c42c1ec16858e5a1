#!/usr/bin/env bash
# `make fresh-check`: proves the README's promise ("on a fresh Debian 12 machine: make train,
# make test") on a Debian 12 root that starts with debootstrap's minimal set and nothing else.
#
#   scripts/fresh-check.sh ROOT_DIR
#
# 1. A minimal bookworm root (debootstrap --variant=minbase) from the mirror this machine's own
#    apt configuration names, unpacked into ROOT_DIR. The finished minimal root is cached as a
#    tar in $AXLE_FRESH_CACHE (default /var/cache/axle-fresh-check), and so are the .debs apt
#    downloads inside it; with an empty cache everything is fetched again.
# 2. The repository's files (tracked, and untracked but not ignored) copied to /root/axle.
# 3. Inside, as root, with a clean environment: `apt-get install make` (the one thing the
#    README asks for first), then exactly the README's two commands, shortened:
#      make train TRAIN_ARGS="--max-steps 50"
#      make test CTEST_ARGS="-R <quick suites>"
#    A package missing from scripts/install-deps.sh fails the build or a test there.
#    `make test` makes the Python venv there (make python: PyTorch 2.15 and the extension) and
#    runs python.test_device of the Python tests in the quick subset.
#    AXLE_FRESH_CTEST=. runs the whole suite instead, and AXLE_FRESH_REPEAT=1 adds
#    `make test-repeat` (CI does both: one Release build serves all three).
#
# The pinned Python wheels (about 2.9 GB) come from the host's download cache of `make python`,
# $AXLE_PIP_CACHE (default ~/.cache/axle/pip of the user running this), mounted at the root's
# /root/.cache/axle/pip: torch is downloaded once per machine, by whichever runs first (as root
# here, the files are then handed to that user). The venv is made afresh in the root, as the
# README's commands make it: that proves python3-venv, python3-dev and the pins (about a minute
# of installing from the cache, plus the extension's build). AXLE_FRESH_KEEP_VENV=1 keeps it in
# $AXLE_FRESH_CACHE/venv between runs instead (for repeated runs by hand; CI does not).
#
# AXLE_FRESH_CCACHE=DIR (CI sets it) caches the root's C++ compiles in DIR on the host between
# runs: ccache is installed in the root before the README's commands and the build configures
# with it as the compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER). It proves no less: ccache
# brings no header or library, a header that is missing makes its cached entry miss and the
# real compiler run (and fail), and linking is never cached.
#
# Needs root (debootstrap, chroot, mount); runs itself in a private mount namespace, and a
# trap unmounts /proc, /sys, /dev, /dev/pts, /dev/shm, the .deb and wheel caches on every exit path.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 ROOT_DIR" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then exec sudo -E bash "$0" "$@"; fi
# Mounts made in a private namespace vanish with it, even if this script is killed.
if [ -z "${AXLE_FRESH_NS:-}" ]; then
  exec env AXLE_FRESH_NS=1 unshare --mount --propagation private bash "$0" "$@"
fi

SUITE=bookworm
ARCH=$(dpkg --print-architecture)
REPO=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(realpath -m "$1")
CACHE=${AXLE_FRESH_CACHE:-/var/cache/axle-fresh-check}
# The invoking user's wheel cache (sudo: SUDO_USER's home, whatever HOME sudo left).
owner_home=$HOME
[ -z "${SUDO_USER:-}" ] || owner_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
PIP_CACHE=$(realpath -m "${AXLE_PIP_CACHE:-$owner_home/.cache/axle/pip}")
VENV_IN_ROOT=/root/.cache/axle/venv-torch-2.15.0   # python-env.sh's default for HOME=/root
# Quick suites of `make test`, one of them driving the axle-train binary, and the layering
# tests (they need python3 and nm: python3-minimal and binutils).
# (No '$' in it: make would expand it.)
CTEST_SUBSET=${AXLE_FRESH_CTEST:-'^(Core|Serialize|Passes|ReadIdx|FashionMNIST|DataLoader)[.]|^Cli[.]Help|^example_01_single_device|^layering|^python[.]test_device'}
log() { echo "fresh-check: $*" >&2; }

stage=setup
mounts=()
cleanup() {
  local rc=$? pid i
  set +e
  # Anything still running inside the root (a test's child, an agent) holds mounts busy.
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT" ] && kill -9 "$pid" 2>/dev/null
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}"
  done
  # And what the commands inside mounted (`ip netns add` in test_multihost bind-mounts
  # /run/netns onto itself), deepest first.
  for i in $(awk -v r="$ROOT/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount "$i" 2>/dev/null || umount -l "$i"
  done
  if grep -q " $ROOT/" /proc/self/mounts; then
    log "ERROR: mounts left under $ROOT:"; grep " $ROOT/" /proc/self/mounts >&2; rc=1
  fi
  # Wheels downloaded in the root as root belong to the user whose cache it is.
  [ -z "${SUDO_UID:-}" ] || [ -n "${AXLE_PIP_CACHE:-}" ] || [ ! -d "$PIP_CACHE" ] || chown -R "$SUDO_UID:$SUDO_GID" "$PIP_CACHE"
  if [ "$rc" -ne 0 ]; then
    log "FAILED during '$stage' (exit $rc)"
  else
    log "PASSED"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# "URI SUITE" for every enabled Debian source in this machine's apt configuration, both the
# one-line (.list) and the deb822 (.sources) formats.
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } print $i, $(i + 1) }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++) print uri[u], suite[s]
           types = ""; enabled = ""; nu = 0; ns = 0 }
         /^#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = "" }
         key == "types" { types = $0 " " }
         key == "enabled" { enabled = tolower($2) }
         key == "uris" { nu = split($0, uri, " ") }
         key == "suites" { ns = split($0, suite, " ") }
         END { flush() }' "$f"
  done
}

mirror_for() { host_sources | awk -v s="$1" '$2 == s { print $1; exit }'; }

mount_in() {  # mount_in TARGET MOUNT-ARGS...
  local target=$ROOT$1; shift
  mount "$@" "$target"
  mounts+=("$target")
}

# --- 1. the minimal root --------------------------------------------------------------------
stage="host tools"
command -v debootstrap >/dev/null || {
  log "installing debootstrap on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
}
MIRROR=$(mirror_for "$SUITE")
[ -n "$MIRROR" ] || { log "ERROR: this machine's apt configuration names no mirror for '$SUITE'"; exit 1; }
# The proxy and validity settings this machine's apt uses to reach that mirror.
APT_NET=$(apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy|Retries) ' || true)
proxy=$(apt-config dump | sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/p')
[ -z "$proxy" ] || export http_proxy=$proxy

stage="fresh root"
if grep -q " $ROOT[/ ]" /proc/self/mounts; then
  log "ERROR: something is mounted under $ROOT; not deleting it"; exit 1
fi
rm -rf --one-file-system "$ROOT"
mkdir -p "$ROOT" "$CACHE/archives"
key=$SUITE-minbase-$ARCH-$(echo "$MIRROR" | md5sum | cut -c1-8)
tarball=$CACHE/$key.tar
t0=$SECONDS
if [ -f "$tarball" ]; then
  log "minimal $SUITE root from the cache ($tarball)"
  tar -C "$ROOT" --numeric-owner -xpf "$tarball"
else
  log "debootstrap --variant=minbase $SUITE from $MIRROR (empty cache)"
  stage=debootstrap
  debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$ROOT" "$MIRROR" > "$ROOT.debootstrap.log" 2>&1 ||
    { tail -n 30 "$ROOT.debootstrap.log" >&2; exit 1; }
  rm -f "$ROOT"/var/cache/apt/archives/*.deb
  tar -C "$ROOT" --numeric-owner --one-file-system -cpf "$tarball.$$" . && mv "$tarball.$$" "$tarball"
fi
log "minimal root ready in $((SECONDS - t0)) s"

stage="apt configuration"
{
  for s in "$SUITE" "$SUITE-updates" "$SUITE-security"; do
    host_sources | awk -v s="$s" '$2 == s { print "deb " $1 " " s " main" }'
  done
} | sort -u > "$ROOT/etc/apt/sources.list"
rm -f "$ROOT"/etc/apt/sources.list.d/*
[ -z "$APT_NET" ] || echo "$APT_NET" > "$ROOT/etc/apt/apt.conf.d/00host-network"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"

# --- 2. the repository ----------------------------------------------------------------------
stage="copy repository"
mkdir -p "$ROOT/root/axle"
(cd "$REPO" && git ls-files -z -co --exclude-standard |
   while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
   tar --null -T - -cf -) | tar -C "$ROOT/root/axle" -xf -
log "copied $(cd "$ROOT/root/axle" && find . -type f | wc -l) files to /root/axle"
# debootstrap writes no /etc/hosts; every installed Debian machine has one (the installer, or
# cloud-init, writes it), and `ip netns exec` binds a namespace's own hosts file over it (the
# two-host tests name their hosts so).
[ -e "$ROOT/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"

# --- 3. the README's commands, inside ------------------------------------------------------
stage="mounts"
# The root a mount point of its own, first (a bind over it later would hide the mounts below):
# `ip netns exec` (the two-host tests) makes / a slave mount, which fails where / is a plain
# directory, as it is in a chroot.
mount_in "" --bind "$ROOT"
mount_in /proc -t proc proc
mount_in /sys -t sysfs -o ro sysfs
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs   # POSIX shm (the dist code)
mount_in /var/cache/apt/archives --bind "$CACHE/archives"
mkdir -p "$PIP_CACHE" "$ROOT/root/.cache/axle/pip"
mount_in /root/.cache/axle/pip --bind "$PIP_CACHE"
CCACHE_IN_ROOT=""
if [ -n "${AXLE_FRESH_CCACHE:-}" ]; then
  CCACHE_IN_ROOT=/root/.cache/ccache
  mkdir -p "$AXLE_FRESH_CCACHE" "$ROOT$CCACHE_IN_ROOT"
  mount_in "$CCACHE_IN_ROOT" --bind "$(realpath -m "$AXLE_FRESH_CCACHE")"
  log "compiles cached in $AXLE_FRESH_CCACHE ($(du -sh "$AXLE_FRESH_CCACHE" | cut -f1))"
fi
if [ "${AXLE_FRESH_KEEP_VENV:-0}" = 1 ]; then
  mkdir -p "$CACHE/venv" "$ROOT$VENV_IN_ROOT"
  mount_in "$VENV_IN_ROOT" --bind "$CACHE/venv"
fi
log "Python wheels from $PIP_CACHE ($(du -sh "$PIP_CACHE" | cut -f1)); venv $([ "${AXLE_FRESH_KEEP_VENV:-0}" = 1 ] && echo "kept in $CACHE/venv" || echo "made afresh")"

stage="inside the fresh root"
t0=$SECONDS
chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -euo pipefail -c '
    say() { echo "fresh-check: inside [${SECONDS} s]: $*" >&2; }
    say "apt-get install make (the README asks for it first)"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends make >/dev/null
    cd /root/axle
    if [ -n "$3" ]; then
      say "apt-get install ccache (AXLE_FRESH_CCACHE: compiles cached in $3)"
      if apt-get install -y -qq --no-install-recommends ccache >/dev/null && command -v ccache >/dev/null; then
        export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR="$3" CCACHE_BASEDIR=/root/axle CCACHE_NOHASHDIR=1
      else
        say "ccache did not install: compiling without the cache"
      fi
    fi
    say "make train TRAIN_ARGS=\"--max-steps 50\""
    make train TRAIN_ARGS="--max-steps 50"
    say "make test CTEST_ARGS=\"-R '"'"'$1'"'"'\""
    make test CTEST_ARGS="-R '"'"'$1'"'"'"
    if [ "$2" = 1 ]; then say "make test-repeat"; make test-repeat; fi
    say "done"
  ' fresh-check "$CTEST_SUBSET" "${AXLE_FRESH_REPEAT:-0}" "$CCACHE_IN_ROOT" &
wait $!   # in the background so that a signal reaches the trap at once
log "the README's commands took $((SECONDS - t0)) s inside the fresh root"
stage=done
