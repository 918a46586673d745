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

# A throwaway CA and a server certificate signed by it, for the name localhost
# and the address 127.0.0.1, under $LQ_SERVERS/tls; and a second CA that signs
# nothing the servers use (a client trusting only it must refuse them). Both
# servers take the certificate; each gets a copy of the key it owns alone
# (PostgreSQL refuses a key that others may read). Exports LQ_TEST_TLS_CA and
# LQ_TEST_TLS_OTHER_CA. Made once per $LQ_SERVERS.
lq_make_tls() {
    local dir=$LQ_SERVERS/tls ca
    if [[ ! -f $dir/server.pem ]]; then
        command -v openssl >/dev/null 2>&1 || { echo "openssl is not installed"; return 1; }
        mkdir -p "$dir"
        for ca in ca other-ca; do
            openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=libqueue test $ca" \
                -keyout "$dir/$ca.key" -out "$dir/$ca.pem" >"$dir/openssl.log" 2>&1 ||
                { cat "$dir/openssl.log"; return 1; }
        done
        printf '%s\n' "basicConstraints = CA:FALSE" "keyUsage = digitalSignature, keyEncipherment" \
            "extendedKeyUsage = serverAuth" "subjectAltName = DNS:localhost, IP:127.0.0.1" \
            >"$dir/server.ext"
        { openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
              -keyout "$dir/server.key" -out "$dir/server.csr" &&
          openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
              -CAcreateserial -days 30 -extfile "$dir/server.ext" -out "$dir/server.pem"
        } >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log"; return 1; }
        chmod 600 "$dir"/*.key
        chmod 755 "$dir"
        chmod 644 "$dir"/*.pem
    fi
    export LQ_TEST_TLS_CA=$dir/ca.pem LQ_TEST_TLS_OTHER_CA=$dir/other-ca.pem
}

# lq_tls_key <folder> <user>: a copy of the server key in <folder>, owned by
# <user> with mode 0600; prints its path.
lq_tls_key() {
    install -m 600 "$LQ_SERVERS/tls/server.key" "$1/server.key" || return 1
    [[ $(id -u) == 0 ]] && { chown "$2": "$1/server.key" || return 1; }
    echo "$1/server.key"
}

lq_pg_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do [[ -x $dir/initdb ]] && { echo "$dir"; return; }; done
    return 1
}

# Starts PostgreSQL as the postgres user (initdb refuses root), with TLS on
# (lq_make_tls) and plain connections still accepted, and exports
# LQ_TEST_PG_URL for the suites. That URL asks for a plain connection
# (sslmode=disable): libpq's default, prefer, would take TLS now that the
# server offers it, and the suites and benchmarks run as before.
# LQ_PG_SETTINGS adds server settings ("-c name=value ..."): bench/run loads
# pg_stat_statements with it; the suites leave it empty.
lq_start_postgres() {
    local bin data=$LQ_SERVERS/pg key
    bin=$(lq_pg_bin) || { echo "no PostgreSQL server installed"; return 1; }
    lq_make_tls || return 1
    LQ_PG_PORT=${LQ_PG_PORT:-$(lq_free_port)}
    local run=()
    [[ $(id -u) == 0 ]] && run=(runuser -u postgres --)
    mkdir -p "$data"
    chown postgres: "$data" 2>/dev/null || true
    "${run[@]}" "$bin/initdb" -D "$data/db" -U postgres -A trust --no-sync -E UTF8 >"$data/initdb.log" 2>&1 ||
        { cat "$data/initdb.log"; return 1; }
    key=$(lq_tls_key "$data" postgres) || return 1
    "${run[@]}" "$bin/pg_ctl" -D "$data/db" -l "$data/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $LQ_PG_PORT -c unix_socket_directories=$data \
            -c max_connections=200 -c shared_buffers=128MB -c fsync=on -c synchronous_commit=on \
            -c ssl=on -c ssl_cert_file=$LQ_SERVERS/tls/server.pem -c ssl_key_file=$key ${LQ_PG_SETTINGS:-}" \
        >/dev/null || { cat "$data/server.log"; return 1; }
    "${run[@]}" "$bin/psql" -q -h 127.0.0.1 -p "$LQ_PG_PORT" -U postgres -d postgres \
        -c "CREATE DATABASE lqtest" >/dev/null || return 1
    export LQ_TEST_PG_URL="postgresql://postgres@127.0.0.1:$LQ_PG_PORT/lqtest?sslmode=disable"
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

# Starts PgBouncer in transaction pooling before the PostgreSQL of
# lq_start_postgres (every database name leads to it), as the postgres user
# (PgBouncer refuses root), with a pool of 2 server connections per database
# and user ($LQ_PGBOUNCER_POOL), fewer than the clients the suites open, so
# that server sessions change hands between transactions. Exports LQ_TEST_PGBOUNCER_URL: the
# PostgreSQL URL through it, with the parameter that tells libqueue.
lq_start_pgbouncer() {
    local dir=$LQ_SERVERS/pgbouncer port i
    command -v pgbouncer >/dev/null 2>&1 || { echo "pgbouncer is not installed"; return 1; }
    [[ -n ${LQ_PG_PORT:-} ]] || { echo "PgBouncer needs lq_start_postgres first"; return 1; }
    port=$(lq_free_port)
    mkdir -p "$dir"
    printf '"postgres" ""\n' >"$dir/users.txt"
    printf '%s\n' "[databases]" "* = host=127.0.0.1 port=$LQ_PG_PORT" "[pgbouncer]" \
        "listen_addr = 127.0.0.1" "listen_port = $port" "unix_socket_dir =" \
        "auth_type = trust" "auth_file = $dir/users.txt" "pool_mode = transaction" \
        "default_pool_size = ${LQ_PGBOUNCER_POOL:-2}" "max_client_conn = 2000" "logfile = $dir/pgbouncer.log" \
        "pidfile = $dir/pgbouncer.pid" >"$dir/pgbouncer.ini"
    local run=()
    [[ $(id -u) == 0 ]] && { chown -R postgres: "$dir"; run=(runuser -u postgres --); }
    "${run[@]}" pgbouncer -d "$dir/pgbouncer.ini" >"$dir/start.log" 2>&1 ||
        { cat "$dir/start.log" "$dir/pgbouncer.log" 2>/dev/null; return 1; }
    for ((i = 0; i < 100; i++)); do
        "${LQ_PYTHON:-/usr/bin/python3}" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" \
            2>/dev/null && break
        sleep 0.1
    done
    ((i < 100)) || { echo "PgBouncer did not start"; cat "$dir/pgbouncer.log"; return 1; }
    export LQ_TEST_PGBOUNCER_URL="postgresql://postgres@127.0.0.1:$port/lqtest?sslmode=disable&pgbouncer=transaction"
    echo "pgbouncer (transaction pooling) on 127.0.0.1:$port"
}

lq_stop_pgbouncer() {
    local pidfile=$LQ_SERVERS/pgbouncer/pgbouncer.pid
    [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null
    return 0
}

lq_stop_servers() {
    lq_stop_pgbouncer
    lq_stop_postgres
    lq_stop_mariadb
    rm -rf "$LQ_SERVERS"
}

# Starts a private MariaDB: its own datadir, socket and pid file under
# $LQ_SERVERS/mariadb, TCP on loopback only (a free port, or $LQ_MARIADB_PORT),
# no binary log, TLS offered (lq_make_tls) and plain connections accepted.
# Creates database lqtest and a user lq (password lq) with every privilege,
# and the right to grant them (the suites create and drop a database per test,
# and hand a role of their own its grants), and exports LQ_TEST_MARIADB_URL
# and LQ_MARIADB_SOCKET.
lq_start_mariadb() {
    local dir=$LQ_SERVERS/mariadb user=root key
    LQ_MARIADB_PORT=${LQ_MARIADB_PORT:-$(lq_free_port)}
    command -v mariadbd >/dev/null 2>&1 || [[ -x /usr/sbin/mariadbd ]] ||
        { echo "no MariaDB server installed"; return 1; }
    local server
    server=$(command -v mariadbd 2>/dev/null || echo /usr/sbin/mariadbd)
    lq_make_tls || return 1
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
    key=$(lq_tls_key "$dir" "$user") || return 1
    "$server" --no-defaults --datadir="$dir/data" --user="$user" \
        --port="$LQ_MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" --log-error="$dir/server.log" \
        --innodb-flush-log-at-trx-commit=1 --innodb-buffer-pool-size=128M \
        --max-connections=500 --max-allowed-packet=64M --skip-log-bin \
        --ssl-cert="$LQ_SERVERS/tls/server.pem" --ssl-key="$key" --ssl-ca="$LQ_SERVERS/tls/ca.pem" \
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
        GRANT ALL ON *.* TO 'lq'@'127.0.0.1' WITH GRANT OPTION;
        GRANT ALL ON *.* TO 'lq'@'localhost' WITH GRANT OPTION;" || return 1
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
