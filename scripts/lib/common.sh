# Shared by scripts/demo and scripts/test: install missing Debian packages,
# build the library, and install the Python package into a private venv.
# Sourced, not run.

LQ_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LQ_PYTHON=/usr/bin/python3

# The Debian packages every build and test needs.
LQ_PACKAGES=(cmake gcc g++ make pkg-config libsqlite3-dev libpq-dev postgresql python3 python3-dev python3-cffi
             python3-setuptools python3-wheel python3-build python3-pytest python3-venv python3-pip
             python3-psycopg2 valgrind
             lua5.4 liblua5.4-dev swig sqlite3 libmariadb-dev mariadb-server python3-pymysql openssl
             tzdata python3-croniter faketime python3-prometheus-client python3-psycopg
             python3-mysqldb python3-sqlalchemy lua-sql-sqlite3 lua5.3 liblua5.3-dev lua5.1
             liblua5.1-0-dev luajit libluajit-5.1-dev luarocks lua-luv pgbouncer
             galera-4 rsync)

lq_install_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    echo "installing: ${missing[*]}"
    local sudo=()
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

# lq_build <build dir> [cmake args...]
lq_build() {
    local dir=$1
    shift
    cmake -S "$LQ_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j"$(nproc)" >/dev/null
}

# lq_python_env <venv dir>: a venv that sees Debian's cffi and pytest, with the
# package built from this tree (no package index is needed or reached).
lq_python_env() {
    local venv=$1
    [[ -x $venv/bin/python ]] || "$LQ_PYTHON" -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install --quiet --no-index --no-build-isolation --force-reinstall \
        --no-deps "$LQ_ROOT/python" >/dev/null
}
