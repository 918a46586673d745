#!/bin/sh
# The rockspec as a user runs it: `luarocks make` against a libqueue installed
# by `cmake --install`, into a rocks tree of its own, then the example worker
# on SQLite with the module from that tree alone (no other Lua path).
#
#   luarocks_make.sh BUILD_DIR SOURCE_DIR ROCKSPEC LUA_VERSION INTERPRETER
#
# LUA_VERSION is luarocks' (5.1 for LuaJIT too, which loads 5.1's modules).
set -eu
build=$1 source=$2 rockspec=$3 version=$4 lua=$5
work=$(mktemp -d /tmp/libqueue-rock.XXXXXX)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
# luarocks make builds in the current directory: a copy of what it reads.
mkdir "$work/src"
cp -r "$source/$rockspec" "$source/bindings" "$source/lua" "$work/src/"
(cd "$work/src" && luarocks --lua-version "$version" make --tree "$work/tree" --deps-mode none \
    "$rockspec" LIBQUEUE_DIR="$work/prefix")

LUA_PATH="$work/tree/share/lua/$version/?.lua" LUA_CPATH="$work/tree/lib/lua/$version/?.so" \
    "$lua" "$source/examples/worker.lua" "$work/jobs.db" 5
