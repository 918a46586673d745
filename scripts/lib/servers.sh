# Private database servers for tests and benchmarks: each lives in a folder of
# its own under $LQ_SERVERS (a temporary folder), listens on loopback only, and
# is stopped by lq_stop_servers. Sourced, not run.

LQ_SERVERS=${LQ_SERVERS:-$(mktemp -d /tmp/libqueue-servers.XXXXXX)}
chmod 755 "$LQ_SERVERS"

# A free TCP port on loopback (the kernel's pick), so runs side by side never
# collide on a fixed one.
lq_free_port() {
    "${LQ_PYTHON:-/usr/bin/python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

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
    LQ_PG_PORT=${LQ_PG_PORT:-$(lq_free_port)}
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
    lq_stop_mariadb
    rm -rf "$LQ_SERVERS"
}

# Starts a private MariaDB: its own datadir, socket and pid file under
# $LQ_SERVERS/mariadb, TCP on loopback only (a free port, or $LQ_MARIADB_PORT),
# no binary log. Creates database lqtest and a user lq (password lq) with
# every privilege (the suites create and drop a database per test), and
# exports LQ_TEST_MARIADB_URL and LQ_MARIADB_SOCKET.
lq_start_mariadb() {
    local dir=$LQ_SERVERS/mariadb user=root
    LQ_MARIADB_PORT=${LQ_MARIADB_PORT:-$(lq_free_port)}
    command -v mariadbd >/dev/null 2>&1 || [[ -x /usr/sbin/mariadbd ]] ||
        { echo "no MariaDB server installed"; return 1; }
    local server
    server=$(command -v mariadbd 2>/dev/null || echo /usr/sbin/mariadbd)
    mkdir -p "$dir"
    # mariadbd runs as the mysql user where there is one (it refuses root
    # without --user=root).
    if [[ $(id -u) == 0 ]] && id mysql >/dev/null 2>&1; then
        user=mysql
        chown mysql: "$dir"
    elif [[ $(id -u) != 0 ]]; then
        user=$(id -un)
    fi
    mariadb-install-db --no-defaults --datadir="$dir/data" --user="$user" --skip-test-db \
        --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 ||
        { cat "$dir/install.log"; return 1; }
    "$server" --no-defaults --datadir="$dir/data" --user="$user" \
        --port="$LQ_MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" --log-error="$dir/server.log" \
        --innodb-flush-log-at-trx-commit=1 --innodb-buffer-pool-size=128M \
        --max-connections=500 --max-allowed-packet=64M --skip-log-bin \
        </dev/null >/dev/null 2>&1 &
    local i
    for ((i = 0; i < 600; i++)); do
        mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -u root ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    ((i < 600)) || { echo "mariadb did not start"; cat "$dir/server.log"; return 1; }
    mariadb --no-defaults --socket="$dir/mysqld.sock" -u root -e "
        CREATE DATABASE lqtest;
        CREATE USER 'lq'@'127.0.0.1' IDENTIFIED BY 'lq';
        CREATE USER 'lq'@'localhost' IDENTIFIED BY 'lq';
        GRANT ALL ON *.* TO 'lq'@'127.0.0.1';
        GRANT ALL ON *.* TO 'lq'@'localhost';" || return 1
    export LQ_MARIADB_SOCKET=$dir/mysqld.sock
    export LQ_TEST_MARIADB_URL="mysql://lq:lq@127.0.0.1:$LQ_MARIADB_PORT/lqtest"
    echo "mariadb on 127.0.0.1:$LQ_MARIADB_PORT"
}

lq_stop_mariadb() {
    local dir=$LQ_SERVERS/mariadb pid i
    [[ -f $dir/mariadbd.pid ]] || return 0
    pid=$(cat "$dir/mariadbd.pid")
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}
