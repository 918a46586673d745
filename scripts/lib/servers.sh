# Private database servers for tests and benchmarks: each lives in a folder of
# its own under $LQ_SERVERS (a temporary folder), listens on loopback only, and
# is stopped by lq_stop_servers. Sourced, not run.

LQ_SERVERS=${LQ_SERVERS:-$(mktemp -d /tmp/libqueue-servers.XXXXXX)}
chmod 755 "$LQ_SERVERS"
LQ_PG_PORT=${LQ_PG_PORT:-55432}

lq_pg_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do [[ -x $dir/initdb ]] && { echo "$dir"; return; }; done
    return 1
}

# Starts PostgreSQL as the postgres user (initdb refuses root) and exports
# LQ_TEST_PG_URL for the suites.
lq_start_postgres() {
    local bin data=$LQ_SERVERS/pg
    bin=$(lq_pg_bin) || { echo "no PostgreSQL server installed"; return 1; }
    local run=()
    [[ $(id -u) == 0 ]] && run=(runuser -u postgres --)
    mkdir -p "$data"
    chown postgres: "$data" 2>/dev/null || true
    "${run[@]}" "$bin/initdb" -D "$data/db" -U postgres -A trust --no-sync -E UTF8 >"$data/initdb.log" 2>&1 ||
        { cat "$data/initdb.log"; return 1; }
    "${run[@]}" "$bin/pg_ctl" -D "$data/db" -l "$data/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $LQ_PG_PORT -c unix_socket_directories=$data \
            -c max_connections=200 -c shared_buffers=128MB -c fsync=on -c synchronous_commit=on" \
        >/dev/null || { cat "$data/server.log"; return 1; }
    "${run[@]}" "$bin/psql" -q -h 127.0.0.1 -p "$LQ_PG_PORT" -U postgres -d postgres \
        -c "CREATE DATABASE lqtest" >/dev/null || return 1
    export LQ_TEST_PG_URL="postgresql://postgres@127.0.0.1:$LQ_PG_PORT/lqtest"
    echo "postgresql on 127.0.0.1:$LQ_PG_PORT"
}

lq_stop_postgres() {
    local bin data=$LQ_SERVERS/pg
    [[ -d $data/db ]] || return 0
    bin=$(lq_pg_bin) || return 0
    local run=()
    [[ $(id -u) == 0 ]] && run=(runuser -u postgres --)
    "${run[@]}" "$bin/pg_ctl" -D "$data/db" -m immediate -w stop >/dev/null 2>&1 || true
}

lq_stop_servers() {
    lq_stop_postgres
    rm -rf "$LQ_SERVERS"
}
