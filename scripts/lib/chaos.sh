# The chaos suite (tests/chaos), for scripts/chaos and scripts/test: sourced
# after common.sh and servers.sh, once the shared servers run.

# The private servers of the server-fault tests live under $LQ_SERVERS/chaos;
# whatever a run cut short leaves running is stopped by lq_stop_chaos_servers.
lq_chaos_prepare() {
    export LQ_CHAOS_SERVERS=$LQ_SERVERS/chaos
    mkdir -p "$LQ_CHAOS_SERVERS"
    chmod 755 "$LQ_CHAOS_SERVERS"
}

lq_stop_chaos_servers() {
    local dir bin pid
    [[ -n ${LQ_CHAOS_SERVERS:-} ]] || return 0
    bin=$(lq_pg_bin 2>/dev/null) || bin=
    for dir in "$LQ_CHAOS_SERVERS"/lq-chaos-pg-*; do
        [[ -n $bin && -f $dir/db/postmaster.pid ]] || continue
        pid=$(head -n 1 "$dir/db/postmaster.pid")
        kill -CONT "$pid" 2>/dev/null
        if [[ $(id -u) == 0 ]]; then
            runuser -u postgres -- "$bin/pg_ctl" -D "$dir/db" -m immediate -w stop >/dev/null 2>&1
        else
            "$bin/pg_ctl" -D "$dir/db" -m immediate -w stop >/dev/null 2>&1
        fi
    done
    for dir in "$LQ_CHAOS_SERVERS"/lq-chaos-mariadb-*; do
        [[ -f $dir/mariadbd.pid ]] || continue
        pid=$(cat "$dir/mariadbd.pid")
        kill -CONT "$pid" 2>/dev/null
        kill -9 "$pid" 2>/dev/null
    done
}

# lq_chaos_suite BUILD [pytest arguments...]: runs the suite with the Python
# package of BUILD's venv; the log is BUILD/chaos.log. Prints the figures
# (or, when it fails, the whole log) and its time; returns pytest's status.
lq_chaos_suite() {
    local build=$1 start status
    shift
    echo "== chaos ($([[ ${LQ_CHAOS_LONG:-} == 1 ]] && echo long || echo quick) mode: kills, server and network faults)"
    start=$(date +%s)
    LQ_BUILD_DIR=$build "$build/venv/bin/python" -m pytest -q -p no:cacheprovider -rfEx \
        "$LQ_ROOT/tests/chaos" "$@" > "$build/chaos.log" 2>&1
    status=$?
    if ((status != 0)); then
        cat "$build/chaos.log"
    else
        sed -n '/= chaos figures/,$p' "$build/chaos.log"
    fi
    echo "chaos suite: $(($(date +%s) - start)) s"
    return $status
}
