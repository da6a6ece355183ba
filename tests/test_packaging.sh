#!/usr/bin/env bash
# Packaging test: installs a build tree into a temporary prefix, checks what was installed (headers,
# libmptrain.so with its soname links, the CMake package, mptrain.pc), then builds and runs the two
# embedding samples OUT OF TREE against that prefix only: samples/embed_c through pkg-config and its
# Makefile, samples/embed_cpp through find_package(mptrain). Also checks that SameMajorVersion
# rejects a request for another major version.
#
# usage: test_packaging.sh BUILD_DIR SOURCE_DIR
# env:   CC, CXX (compilers for the sample builds), CMAKE (default cmake), KEEP_PREFIX=1 keeps the files
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
    exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
CMAKE=${CMAKE:-cmake}
export CC=${CC:-cc} CXX=${CXX:-c++}
for tool in "$CMAKE" pkg-config make readelf ldd "$CC" "$CXX"; do
    command -v "$tool" >/dev/null || { echo "test_packaging: '$tool' is required" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mptrain-packaging.XXXXXX")
if [[ ${KEEP_PREFIX:-0} != 1 ]]; then trap 'rm -rf "$work"' EXIT; else echo "keeping $work"; fi
prefix=$work/prefix
checks=0
check() { checks=$((checks + 1)); }
die() { echo "PACKAGING FAIL: $*" >&2; exit 1; }

echo "== cmake --install $build_dir --prefix $prefix"
"$CMAKE" --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; die "install failed"; }

# ---- installed files -------------------------------------------------------------------------------
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
[[ -n $version ]] || die "no CMAKE_PROJECT_VERSION in $build_dir/CMakeCache.txt"
major=${version%%.*}
for header in "$source_dir"/include/mptrain/*.h "$source_dir"/include/mptrain/*.hpp; do
    [[ -e $header ]] || continue
    installed=$prefix/include/mptrain/$(basename "$header")
    cmp -s "$header" "$installed" || die "$installed is missing or differs from the source"
    check
done

real=$(find "$prefix" -name "libmptrain.so.$version" -type f | head -n 1)
[[ -n $real ]] || die "libmptrain.so.$version not installed"
libdir=$(dirname "$real")
[[ $(readlink "$libdir/libmptrain.so.$major") == "libmptrain.so.$version" ]] \
    || die "libmptrain.so.$major should link to libmptrain.so.$version"
[[ $(readlink "$libdir/libmptrain.so") == "libmptrain.so.$major" ]] \
    || die "libmptrain.so should link to libmptrain.so.$major"
check
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == "libmptrain.so.$major" ]] || die "soname is '$soname', expected libmptrain.so.$major"
check
if readelf -d "$real" | grep -E '(RPATH|RUNPATH)' | grep -q "$build_dir"; then
    die "the installed library still has an rpath into the build tree"
fi
check

config_dir=$(dirname "$(find "$prefix" -name mptrain-config.cmake | head -n 1)")
for file in mptrain-config.cmake mptrain-config-version.cmake mptrain-targets.cmake; do
    [[ -f $config_dir/$file ]] || die "$file not installed"
    check
done
pc_file=$(find "$prefix" -name mptrain.pc | head -n 1)
[[ -n $pc_file ]] || die "mptrain.pc not installed"
export PKG_CONFIG_PATH=$(dirname "$pc_file")
[[ $(pkg-config --modversion mptrain) == "$version" ]] || die "pkg-config --modversion mptrain != $version"
check
echo "installed $version: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

# The samples must not find the build tree's library by accident.
unset LD_LIBRARY_PATH MPTRAIN_LIB_DIR || true

resolved_mptrain() { # prints the libmptrain.so that the dynamic loader picks for a program
    ldd "$1" | awk '/libmptrain/ { print $3 }'
}
same_file() { [[ $(readlink -f "$1") == $(readlink -f "$2") ]]; }

# ---- samples/embed_c through pkg-config --------------------------------------------------------------
echo "== embed_c: pkg-config --cflags --libs mptrain -> $(pkg-config --cflags --libs mptrain)"
mkdir -p "$work/embed_c"
(cd "$work/embed_c" && make --no-print-directory -f "$source_dir/samples/embed_c/Makefile" CC="$CC") \
    || die "embed_c did not build against the installed package"
same_file "$(resolved_mptrain "$work/embed_c/embed_c")" "$real" || die "embed_c does not load the installed libmptrain"
"$work/embed_c/embed_c" | tee "$work/embed_c.out" || die "embed_c failed"
grep -q '^accuracy' "$work/embed_c.out" || die "embed_c printed no accuracy"
check

# ---- samples/embed_cpp through find_package --------------------------------------------------------
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
echo "== embed_cpp: find_package(mptrain) with CMAKE_PREFIX_PATH=$prefix"
"$CMAKE" -S "$source_dir/samples/embed_cpp" -B "$work/embed_cpp" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$CXX" >"$work/embed_cpp.configure.log" 2>&1 \
    || { cat "$work/embed_cpp.configure.log"; die "embed_cpp did not configure against the installed package"; }
grep -q "mptrain_DIR:PATH=$config_dir" "$work/embed_cpp/CMakeCache.txt" \
    || die "embed_cpp found mptrain elsewhere than $config_dir"
"$CMAKE" --build "$work/embed_cpp" >"$work/embed_cpp.build.log" 2>&1 \
    || { cat "$work/embed_cpp.build.log"; die "embed_cpp did not build"; }
same_file "$(resolved_mptrain "$work/embed_cpp/embed_cpp")" "$real" || die "embed_cpp does not load the installed libmptrain"
"$work/embed_cpp/embed_cpp" | tee "$work/embed_cpp.out" || die "embed_cpp failed"
grep -q '^accuracy' "$work/embed_cpp.out" || die "embed_cpp printed no accuracy"
check

# ---- SameMajorVersion: another major version is refused ---------------------------------------------
mkdir -p "$work/other_major"
cat >"$work/other_major/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(other_major LANGUAGES NONE)
find_package(mptrain $((major + 1)).0 CONFIG REQUIRED)
EOF
if "$CMAKE" -S "$work/other_major" -B "$work/other_major/build" -DCMAKE_PREFIX_PATH="$prefix" \
    >"$work/other_major.log" 2>&1; then
    die "find_package(mptrain $((major + 1)).0) accepted version $version"
fi
grep -q "not compatible\|not suitable\|version" "$work/other_major.log" || { cat "$work/other_major.log"; die "unexpected find_package failure"; }
check

echo "test_packaging: OK ($checks checks): installed $version, embed_c (pkg-config) and embed_cpp (find_package) built out of tree and ran"
