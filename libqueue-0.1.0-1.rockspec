-- The Lua module, built against an installed libqueue (`cmake --install`
-- puts libqueue.h and libqueue.so in the prefix), for the Lua luarocks is
-- set for (5.1, LuaJIT, 5.3, 5.4):
--
--     luarocks make LIBQUEUE_DIR=/usr/local
--
-- SWIG generates the C part from bindings/libqueue.i, as the CMake build
-- does; it and the module are made in build/luarocks/. The version is the
-- project's (CMakeLists.txt), which the file's name carries.
rockspec_format = "3.0"
package = "libqueue"
version = "0.1.0-1"
source = { url = "." }
description = {
  summary = "Task queues kept in a service's own SQL tables (PostgreSQL, MariaDB, SQLite)",
}
dependencies = { "lua >= 5.1, < 5.5" }
build_dependencies = {}
external_dependencies = {
  LIBQUEUE = { header = "libqueue.h", library = "queue" },
}
build = {
  type = "command",
  build_command = [[
    mkdir -p build/luarocks && \
    swig -lua -nomoduleglobal -I"$(LIBQUEUE_INCDIR)" -Ilua -o build/luarocks/libqueue_core_wrap.c \
      bindings/libqueue.i && \
    $(CC) $(CFLAGS) -D_GNU_SOURCE -I"$(LUA_INCDIR)" -I"$(LIBQUEUE_INCDIR)" -Ilua \
      build/luarocks/libqueue_core_wrap.c lua/lq_lua_log.c lua/lq_lua_settler.c \
      $(LIBFLAG) -o build/luarocks/core.so \
      -L"$(LIBQUEUE_LIBDIR)" -Wl,-rpath,"$(LIBQUEUE_LIBDIR)" -lqueue -lpthread
  ]],
  install = {
    lib = { ["libqueue.core"] = "build/luarocks/core.so" },
    lua = {
      ["libqueue"] = "lua/libqueue.lua",
      ["libqueue.base"] = "lua/libqueue/base.lua",
      ["libqueue.log"] = "lua/libqueue/log.lua",
      ["libqueue.options"] = "lua/libqueue/options.lua",
      ["libqueue.table"] = "lua/libqueue/table.lua",
      ["libqueue.delivery"] = "lua/libqueue/delivery.lua",
      ["libqueue.subscription"] = "lua/libqueue/subscription.lua",
      ["libqueue.broker"] = "lua/libqueue/broker.lua",
    },
  },
}
