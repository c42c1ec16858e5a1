#!/usr/bin/env bash
# `make python`: the Python package of axle's `xla` device (python/), ready to import.
#
#   scripts/python-env.sh            (make python runs it after `make build`; alone, it runs that)
#
# 1. A virtual environment OUTSIDE the source tree, made with Debian's /usr/bin/python3
#    (python3-venv, python3-dev: scripts/install-deps.sh): $AXLE_VENV, default
#    ~/.cache/axle/venv-torch-2.15.0 (about 5.4 GB). Remade if it no longer runs.
# 2. The exact versions of python/requirements.txt in it (torch==2.15.0, numpy, pytest and every
#    dependency), installed only when one is missing or has another version (read from the
#    installed metadata). The wheels are downloaded once into $AXLE_PIP_CACHE/downloads
#    (default ~/.cache/axle/pip, outside the tree; about 2.9 GB) and installed from there with
#    --no-index, so a rerun, a second venv or `make fresh-check` (which mounts that directory
#    into its root) installs without the network. (pip's own HTTP cache is not enough: it keeps
#    only what the server lets it, and behind some proxies that is nothing.)
# 3. The extension axle._C built in place (python/axle/_C*.so) against the pinned torch and
#    $AXLE_BUILD_DIR/lib/libaxle.so (default build/; the Makefile passes its BUILD), with
#    `setup.py build_ext --inplace`, which also writes python/axle/_build_info.py. ninja
#    recompiles only what a changed source or header touches; when nothing is newer than the
#    extension, setup.py is not even run.
# 4. The distribution `axle` installed editable: a .pth file naming python/ and its metadata
#    (see there why not `pip install -e`), so the venv imports `axle` and `torch_xla` from this
#    tree and an edited .py file or a rebuilt _C*.so is live at once.
# 5. $AXLE_BUILD_DIR/python-venv, a link to the venv: the Python tests' ctest entries run its
#    python (make test).
#
# One venv serves one tree: `make python` in another worktree points the venv's `axle` there
# (AXLE_VENV gives a tree its own venv; PYTHONPATH=TREE/python comes before the venv's paths).
# Idempotent; with nothing changed it takes a few seconds (one import of torch and axle, the
# last check).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TORCH_VERSION=2.15.0   # also in python/requirements.txt and python/axle/__init__.py (checked below)
VENV=$(realpath -m "${AXLE_VENV:-$HOME/.cache/axle/venv-torch-$TORCH_VERSION}")
PIP_CACHE=$(realpath -m "${AXLE_PIP_CACHE:-$HOME/.cache/axle/pip}")
WHEELS=$PIP_CACHE/downloads   # the pinned wheels themselves (pip's own cache is the rest)
BUILD=$(realpath -m "${AXLE_BUILD_DIR:-$REPO/build}")
REQ=$REPO/python/requirements.txt
PY=/usr/bin/python3    # Debian's, not whatever python3 comes first on PATH (pyenv, conda)
JOBS=${JOBS:-$(nproc)}
t_start=$SECONDS
say() { echo "python-env: $*" >&2; }

case "$VENV/" in
  "$REPO"/*) say "ERROR: AXLE_VENV=$VENV is inside the source tree; put it outside ($REPO)"; exit 1 ;;
esac
grep -qx "torch==$TORCH_VERSION" "$REQ" && grep -q "^TORCH_VERSION = \"$TORCH_VERSION\"" "$REPO/python/axle/__init__.py" || {
  say "ERROR: torch $TORCH_VERSION is not the pin of both python/requirements.txt and python/axle/__init__.py"; exit 1; }

# Debian's venv, the headers the extension compiles against, ninja and g++ come with
# scripts/install-deps.sh, which `make build` runs. Outside make (where `make python` ran
# `make build` first), run it here.
[ -n "${MAKELEVEL:-}" ] || make -C "$REPO" --no-print-directory build BUILD="$BUILD"
[ -f "$BUILD/lib/libaxle.so" ] || { say "ERROR: no $BUILD/lib/libaxle.so (make build)"; exit 1; }

mkdir -p "$(dirname "$VENV")" "$WHEELS"
# Two `make python` at once (two worktrees) must not build the same venv together.
exec 9>"$VENV.lock"
flock 9

# --- 1. the venv ---------------------------------------------------------------------------------
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -n "$(ls -A "$VENV" 2>/dev/null)" ] && { ! "$VENV/bin/python" -c '' 2>/dev/null || [ ! -d "$VENV/lib/python$PYVER" ]; }; then
  # Unusable: made by another python3 minor version than Debian's now, or broken.
  [ -f "$VENV/pyvenv.cfg" ] || { say "ERROR: $VENV exists and is not a venv; move it away"; exit 1; }
  say "$VENV does not run; making it again"
  find "$VENV" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +   # it may be a mount point
fi
if [ ! -x "$VENV/bin/python" ]; then   # absent, or an empty directory (fresh-check's mount)
  t0=$SECONDS
  "$PY" -m venv "$VENV"
  say "made the venv $VENV with $($PY --version) in $((SECONDS - t0)) s"
fi

# --- 2. the pinned packages ----------------------------------------------------------------------
# Which pins are unmet: read from the installed metadata, without importing anything (50 ms).
unmet=$("$VENV/bin/python" - "$REQ" <<'EOF'
import importlib.metadata as md, sys
for line in open(sys.argv[1]):
    req = line.split("#", 1)[0].strip()
    if not req:
        continue
    name, want = req.split("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have != want:
        print(f"{name} {have or 'missing'} (pinned {want})")
EOF
)
if [ -n "$unmet" ]; then
  say "to install: $(echo "$unmet" | head -3 | paste -sd, -)$([ "$(echo "$unmet" | wc -l)" -le 3 ] || echo ", ...")"
  pipx() { PIP_CACHE_DIR="$PIP_CACHE" PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip "$@"; }
  t0=$SECONDS
  # Offline from the wheels downloaded before; when one is missing, download what is missing
  # (pip skips the files already there) and install again. The pins cover every dependency,
  # so the install cannot reach past them.
  if ! pipx install --quiet --no-index --find-links "$WHEELS" -r "$REQ" 2>/dev/null; then
    say "downloading the pinned wheels into $WHEELS (about 3.5 GB when empty)"
    pipx download --quiet --only-binary=:all: --no-deps -d "$WHEELS" -r "$REQ"
    say "downloaded in $((SECONDS - t0)) s"
    pipx install --quiet --no-index --find-links "$WHEELS" -r "$REQ"
  fi
  say "installed the pinned packages in $((SECONDS - t0)) s (venv: $(du -sh "$VENV" | cut -f1))"
fi

# --- 3. the extension, in place ------------------------------------------------------------------
# Nothing to do when the extension is newer than every source and header it may include, than
# setup.py and than the venv's torch, and was linked against this build's libaxle.so: then even
# setup.py (which imports torch, and copies the extension over itself) is not run.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ext=$(ls "$REPO"/python/axle/_C*.so 2>/dev/null | head -1 || true)
if [ -z "$ext" ] || ! grep -qF "LIBAXLE = '$BUILD/lib/libaxle.so'" "$REPO/python/axle/_build_info.py" 2>/dev/null ||
   [ -n "$(find "$REPO/python/csrc" "$REPO/python/setup.py" "$SITE/torch/version.py" -newer "$ext" -print -quit)" ] ||
   [ -n "$(find "$REPO/include" "$REPO/src" -newer "$ext" \( -name '*.h' -o -name '*.def' -o -name '*.inc' \) -print -quit)" ]; then
  t0=$SECONDS
  (cd "$REPO/python" && AXLE_BUILD_DIR="$BUILD" MAX_JOBS="$JOBS" "$VENV/bin/python" setup.py --quiet build_ext --inplace 2>&1 |
     { grep -v -e 'No CUDA runtime is found' -e '^running ' -e '^copying ' || true; } |
     sed -E 's|^(\[[0-9]+/[0-9]+\]) .* -c (\S+[.]cpp) .*|\1 compile \2|')
  ext=$(ls "$REPO"/python/axle/_C*.so 2>/dev/null | head -1 || true)
  [ -n "$ext" ] || { say "ERROR: the extension was not built (python/axle/_C*.so)"; exit 1; }
  touch "$ext"   # setuptools keeps the build's time on the copy; it is up to date as of now
  say "built the extension in $((SECONDS - t0)) s: ${ext#$REPO/}"
fi

# --- 4. the distribution, editable ---------------------------------------------------------------
# What `pip install -e` gives for this flat layout (a .pth file naming python/, and the
# distribution's metadata), written directly: pip's editable install runs setup.py's build_ext
# again in a temporary directory, i.e. recompiles the extension from scratch every time (PEP 660;
# about 5 minutes of CPU), and pip 23's legacy route (setup.py develop) hands over to that one in
# an isolated build environment without torch, where setup.py cannot even be read. The in-place
# extension of step 3 is the one build; the .pth makes the venv import it and every .py file of
# python/ live. The metadata makes `pip show axle`, `pip check` (torch==2.15.0) and
# `pip uninstall axle` work as after `pip install -e`.
VERSION=$(sed -n 's/^ *version="\([^"]*\)",$/\1/p' "$REPO/python/setup.py")
DIST=$SITE/axle-$VERSION.dist-info
if [ "$(cat "$SITE/axle.pth" 2>/dev/null)" != "$REPO/python" ] || [ ! -f "$DIST/RECORD" ]; then
  rm -rf "$SITE"/axle-*.dist-info "$SITE"/__editable__.axle-* "$SITE/axle.pth"
  mkdir -p "$DIST"
  echo "$REPO/python" > "$SITE/axle.pth"
  printf 'Metadata-Version: 2.1\nName: axle\nVersion: %s\nSummary: axle as PyTorch'"'"'s xla device (torch_xla'"'"'s API over axle'"'"'s lazy runtime)\nRequires-Python: >=3.11\nRequires-Dist: torch==%s\n' \
    "$VERSION" "$TORCH_VERSION" > "$DIST/METADATA"
  printf 'axle\ntorch_xla\n' > "$DIST/top_level.txt"
  echo "scripts/python-env.sh" > "$DIST/INSTALLER"
  printf '{"url": "file://%s", "dir_info": {"editable": true}}\n' "$REPO/python" > "$DIST/direct_url.json"
  # RECORD: what `pip uninstall axle` removes, with sha256 and size as a wheel's RECORD has them.
  (cd "$SITE" && "$VENV/bin/python" -c '
import base64, hashlib, os, sys
for f in sys.argv[1:]:
    d = open(f, "rb").read()
    h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    print(f"{f},sha256={h},{len(d)}")
print(os.path.dirname(sys.argv[-1]) + "/RECORD,,")' axle.pth "${DIST#$SITE/}"/{METADATA,top_level.txt,INSTALLER,direct_url.json}) > "$DIST/RECORD.tmp"
  mv "$DIST/RECORD.tmp" "$DIST/RECORD"
  say "installed axle $VERSION into the venv, editable from $REPO/python"
fi

# The Python tests' ctest entries (tests/CMakeLists.txt) run $BUILD/python-venv/bin/python.
ln -sfn "$VENV" "$BUILD/python-venv"

# The proof: the venv imports this tree's package, with the pinned torch.
"$VENV/bin/python" - "$REPO/python" <<'EOF'
import os, sys
import axle, torch
here = os.path.dirname(os.path.dirname(os.path.abspath(axle.__file__)))
if not os.path.samefile(here, sys.argv[1]):
    sys.exit(f"python-env: ERROR: the venv imports axle from {here}, not {sys.argv[1]} (PYTHONPATH?)")
print(f"python-env: axle from {here}, torch {torch.__version__}", file=sys.stderr)
EOF
say "ready in $((SECONDS - t_start)) s: $VENV/bin/python"
