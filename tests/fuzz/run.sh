#!/usr/bin/env bash
# tests/fuzz/run.sh [seconds]: builds the libFuzzer targets with clang in
# build/fuzz, replays the committed corpus (ctest -L fuzz), then fuzzes each
# target for `seconds` (default 60; 0: the replay only) over a copy of its
# corpus. Fails on any crash, leaving the input in build/fuzz/artifacts/.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib/common.sh"

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [seconds]" >&2; exit 2; }
# clang, its sanitizer and fuzzer runtimes, and llvm-symbolizer for the
# stack traces.
lq_install_packages clang libclang-rt-dev llvm
build=$LQ_ROOT/build/fuzz
# -O1: fast enough to fuzz, still readable in a stack trace; asserts kept.
CC=clang cmake -S "$LQ_ROOT" -B "$build" -DLQ_BUILD_FUZZ=ON -DLQ_SANITIZE=ON -DLQ_WERROR=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" > /dev/null
# Only the fuzz targets: the rest of this build is not what it is for.
cmake --build "$build" -j"$(nproc)" --target fuzz > /dev/null

echo "== the corpus replayed"
(cd "$build" && ctest --output-on-failure -L fuzz)

((seconds > 0)) || exit 0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p "$build/artifacts"
for target in "$build"/tests/fuzz_*; do
    [[ -f $target && -x $target ]] || continue
    name=$(basename "$target")
    corpus=$build/corpus/${name#fuzz_}
    rm -rf "$corpus"
    mkdir -p "$corpus"
    cp "$LQ_ROOT/tests/fuzz/corpus/${name#fuzz_}"/* "$corpus"/
    echo "== $name for ${seconds}s"
    # -print_final_stats: libFuzzer's summary (runs, exec/s, coverage).
    "$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$name-" "$corpus" > "$build/$name.log" 2>&1 ||
        { tail -n 60 "$build/$name.log"; echo "$name: failed (input in $build/artifacts/)"; exit 1; }
    grep -E "^(#[0-9]+\s+DONE|Done [0-9]+ runs|stat::)" "$build/$name.log"
done
