#!/usr/bin/env bash
# Builds a program against libqueue as installed, the ways a user would, and
# runs each build: the ctest "consumer_install" (tests/CMakeLists.txt).
#
#   run.sh <build dir> <work dir> <version> <client libraries>
#
# Installs <build dir> into <work dir>/prefix (cmake --install --prefix), then
# builds main.c
#   - with CMake, find_package(libqueue): against libqueue::libqueue, then
#     libqueue::libqueue_static (the CMake project in this directory);
#   - with pkg-config: `cc main.c $(pkg-config --cflags --libs libqueue)`, and
#     with `pkg-config --static`, linking libqueue.a;
# and runs each on a SQLite file; each must print <version>. Also checks that
# `pkg-config --cflags libqueue` is -I<prefix>/include alone, and that the
# libraries libqueue.pc links privately are the <client libraries> given
# (space-separated names, the ones the build was configured with: "sqlite3 pq
# mariadb" with every dialect).
#
# $CC (default cc) compiles; $CFLAGS and $LDFLAGS, when set, go to every build
# (ctest sets them to the sanitizer flags of an LQ_SANITIZE build, whose
# library needs its runtime). Exits non-zero at the first failure; <work dir>
# is kept for a look afterwards and emptied at the next run.
set -euo pipefail

if (($# != 4)); then
    echo "usage: $0 <build dir> <work dir> <version> <client libraries>" >&2
    exit 2
fi
build=$1 work=$2 version=$3 clients=$4
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
read -ra cflags <<< "${CFLAGS:-}"
read -ra ldflags <<< "${LDFLAGS:-}"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
step() {
    echo "== $*"
}

# A built program prints the version and nothing else.
check_run() { # <program> <name of the database file>
    local out
    out=$("$1" "$work/$2.db") || fail "$1 exited with $?"
    [[ $out == "$version" ]] || fail "$1 printed '$out', expected '$version'"
    echo "$1: $out"
}
# Whether <program> loads libqueue.so, and from the prefix.
check_shared() { # <program>
    local line
    line=$(ldd "$1" | grep 'libqueue\.so') || fail "$1 does not load libqueue.so"
    [[ $line == *" => $libdir/libqueue.so"* ]] || fail "$1 loads libqueue from elsewhere: $line"
}
check_static() { # <program>
    ! readelf -d "$1" | grep -q 'NEEDED.*libqueue' || fail "$1 needs libqueue.so: not a static link"
}

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log" ||
    { cat "$work/install.log"; fail "install"; }
pc_file=$(find "$prefix" -path '*/pkgconfig/libqueue.pc' | head -n 1)
[[ -n $pc_file ]] || fail "no libqueue.pc under $prefix"
libdir=$(dirname "$(dirname "$pc_file")")
[[ -f $libdir/libqueue.a && -e $libdir/libqueue.so ]] || fail "libqueue.a or libqueue.so missing in $libdir"

for kind in shared static; do
    step "CMake consumer, $kind target"
    dir=$work/cmake-$kind
    static=OFF
    [[ $kind == static ]] && static=ON
    cmake -S "$here" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DLQ_CONSUMER_STATIC=$static > "$dir.log" 2>&1 || { cat "$dir.log"; fail "configure ($kind)"; }
    # The package found is the one just installed, not another on the system.
    grep -q "^libqueue_DIR:PATH=$prefix/" "$dir/CMakeCache.txt" ||
        fail "find_package took $(grep '^libqueue_DIR' "$dir/CMakeCache.txt")"
    cmake --build "$dir" >> "$dir.log" 2>&1 || { cat "$dir.log"; fail "build ($kind)"; }
    check_run "$dir/consumer" "cmake-$kind"
    "check_$kind" "$dir/consumer"
done

export PKG_CONFIG_PATH=$libdir/pkgconfig
step "pkg-config: $pc_file"
got=$(pkg-config --modversion libqueue)
[[ $got == "$version" ]] || fail "pkg-config --modversion libqueue: '$got', expected '$version'"
got=$(pkg-config --cflags libqueue | xargs) # xargs: without pkgconf's trailing space
echo "pkg-config --cflags libqueue: $got"
[[ $got == "-I$prefix/include" ]] || fail "--cflags: '$got', expected '-I$prefix/include' alone"
# The -l flags a static link adds, but libqueue's own and the threads library.
got=$(pkg-config --static --libs-only-l libqueue | tr ' ' '\n' | grep -vxE -- '-lqueue|-lpthread|' |
      sed 's/^-l//' | sort | tr '\n' ' ')
want=$(tr ' ' '\n' <<< "$clients" | grep -v '^$' | sort | tr '\n' ' ')
echo "pkg-config --static --libs libqueue: $(pkg-config --static --libs libqueue)"
[[ $got == "$want" ]] || fail "libqueue.pc links privately '${got% }', expected '${want% }'"

step "cc main.c \$(pkg-config --cflags --libs libqueue)"
read -ra flags <<< "$(pkg-config --cflags --libs libqueue)"
"$cc" -std=c11 -Wall -Wextra -Werror "${cflags[@]}" "$here/main.c" -o "$work/pc-shared" \
    "${flags[@]}" -Wl,-rpath,"$libdir" "${ldflags[@]}" || fail "build with pkg-config"
check_run "$work/pc-shared" pc-shared
check_shared "$work/pc-shared"

# -lqueue would take libqueue.so, which is there too: -l:libqueue.a names the
# archive, so the link needs every library the static flags list.
step "cc main.c \$(pkg-config --static --cflags --libs libqueue), libqueue.a"
read -ra flags <<< "$(pkg-config --static --cflags --libs libqueue)"
static_flags=()
for flag in "${flags[@]}"; do
    [[ $flag == -lqueue ]] && flag=-l:libqueue.a
    static_flags+=("$flag")
done
[[ " ${static_flags[*]} " == *" -l:libqueue.a "* ]] || fail "pkg-config --static --libs lacks -lqueue"
"$cc" -std=c11 -Wall -Wextra -Werror "${cflags[@]}" "$here/main.c" -o "$work/pc-static" \
    "${static_flags[@]}" "${ldflags[@]}" || fail "build with pkg-config --static"
check_run "$work/pc-static" pc-static
check_static "$work/pc-static"

echo "consumer builds: all passed"
