#!/usr/bin/env bash
# The `install_package` test: installs this build into a prefix inside the build tree, then
# builds tests/install/main.cpp out of tree against that prefix twice -- with find_package(axle)
# and with pkg-config -- and runs both builds and the installed tools (axle-train,
# axle-fsdp-consolidate). Every program must
# load the installed libaxle (not the build tree's).
#
#   bash tests/install/check.sh BUILD_DIR [CXX] [CMAKE] [CONSUMER_FLAGS]
#
# CONSUMER_FLAGS go to both consumer builds (the sanitizer build passes -fsanitize=...).
set -euo pipefail
B=$(cd "$1" && pwd)
CXX=${2:-c++}
CMAKE=${3:-cmake}
XFLAGS=${4:-}
S=$(cd "$(dirname "$0")" && pwd)
W="$B/install-check"
P="$W/prefix"
rm -rf "$W"
mkdir -p "$W"
say() { echo "install_package: $*"; }
die() { echo "install_package: FAILED: $*" >&2; exit 1; }

"$CMAKE" --install "$B" --prefix "$P" >"$W/install.log" 2>&1 || { cat "$W/install.log" >&2; die "cmake --install"; }
lib=$(find "$P" -name 'libaxle.so' | head -n 1)
[ -n "$lib" ] || die "no libaxle.so under $P"
LIBDIR=$(dirname "$lib")
for f in include/axle/axle.h bin/axle-train bin/axle-fsdp-consolidate bin/axle-run; do [ -e "$P/$f" ] || die "$f not installed"; done
[ -f "$LIBDIR/cmake/axle/axleConfig.cmake" ] && [ -f "$LIBDIR/cmake/axle/axleConfigVersion.cmake" ] \
  || die "no CMake package under $LIBDIR/cmake/axle"
[ -f "$LIBDIR/pkgconfig/axle.pc" ] || die "no $LIBDIR/pkgconfig/axle.pc"
say "installed into $P"

# Programs must resolve libaxle inside the prefix, with no LD_LIBRARY_PATH help.
uses_installed_lib() {  # program
  local line got
  line=$(env -u LD_LIBRARY_PATH ldd "$1" | grep 'libaxle\.so' || true)
  got=$(awk '{print $3}' <<<"$line")
  [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$lib")" ] \
    || die "$1 does not load libaxle from $LIBDIR (ldd: ${line:-no libaxle})"
}

# Every installed header compiles on its own include path alone: none reaches into src/ or into a
# header that is not installed.
{
  cd "$P/include"
  find axle -name '*.h' | sort | sed 's/.*/#include <&>/'
} >"$W/all_headers.cpp"
"$CXX" -std=c++20 -fsyntax-only -I"$P/include" "$W/all_headers.cpp" || die "the installed headers do not compile on their own"
say "$(wc -l <"$W/all_headers.cpp") installed headers compile against the prefix alone"

uses_installed_lib "$P/bin/axle-train"
env -u LD_LIBRARY_PATH "$P/bin/axle-train" --help >/dev/null || die "installed axle-train --help"
say "installed axle-train runs"
uses_installed_lib "$P/bin/axle-fsdp-consolidate"
env -u LD_LIBRARY_PATH "$P/bin/axle-fsdp-consolidate" --help >/dev/null || die "installed axle-fsdp-consolidate --help"
say "installed axle-fsdp-consolidate runs"

# 1. CMake: find_package(axle) from the prefix.
"$CMAKE" -S "$S" -B "$W/cmake" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$XFLAGS" \
  >"$W/cmake-configure.log" 2>&1 || { cat "$W/cmake-configure.log" >&2; die "configure with find_package(axle)"; }
found=$(sed -n 's/^axle_DIR:PATH=//p' "$W/cmake/CMakeCache.txt")
[ "$found" = "$LIBDIR/cmake/axle" ] || die "find_package(axle) found '$found', not $LIBDIR/cmake/axle"
"$CMAKE" --build "$W/cmake" >"$W/cmake-build.log" 2>&1 || { cat "$W/cmake-build.log" >&2; die "build with find_package(axle)"; }
uses_installed_lib "$W/cmake/axle-consumer"
env -u LD_LIBRARY_PATH "$W/cmake/axle-consumer" || die "the find_package(axle) build did not run"

# 2. pkg-config, seeing only the prefix's .pc files.
export PKG_CONFIG_LIBDIR="$LIBDIR/pkgconfig" PKG_CONFIG_PATH=
pkg-config --exists axle || die "pkg-config does not find axle"
mkdir -p "$W/pkgconfig"
# shellcheck disable=SC2046,SC2086  # the flags are meant to split
"$CXX" -std=c++20 -O1 $XFLAGS "$S/main.cpp" -o "$W/pkgconfig/axle-consumer" $(pkg-config --cflags --libs axle) \
  -Wl,-rpath,"$(pkg-config --variable=libdir axle)" || die "build with pkg-config (axle $(pkg-config --modversion axle))"
uses_installed_lib "$W/pkgconfig/axle-consumer"
env -u LD_LIBRARY_PATH "$W/pkgconfig/axle-consumer" || die "the pkg-config build did not run"
say "ok (find_package and pkg-config builds, axle $(pkg-config --modversion axle))"
