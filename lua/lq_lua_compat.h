/* The parts of the Lua 5.4 C API the module uses that older Luas lack, so
 * one source builds for Lua 5.1 (and LuaJIT, which has its API), 5.3 and 5.4.
 * Each is defined only where the headers lack it (and SWIG's runtime, which
 * defines some of them in the wrapper, has not); where they have it, the real
 * one is used. */
#ifndef LQ_LUA_COMPAT_H
#define LQ_LUA_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502
#ifndef lua_rawlen
#define lua_rawlen(L, index) lua_objlen(L, (index))
#endif

/* A light userdata key in the registry (5.2 has lua_rawgetp/lua_rawsetp). */
static inline void lq_lua_rawgetp(lua_State *L, int index, const void *key) {
    lua_pushlightuserdata(L, (void *)key);
    lua_rawget(L, index < 0 && index > LUA_REGISTRYINDEX ? index - 1 : index);
}
static inline void lq_lua_rawsetp(lua_State *L, int index, const void *key) {
    lua_pushlightuserdata(L, (void *)key);
    lua_insert(L, -2);
    lua_rawset(L, index < 0 && index > LUA_REGISTRYINDEX ? index - 1 : index);
}
#ifndef lua_rawgetp
#define lua_rawgetp lq_lua_rawgetp
#define lua_rawsetp lq_lua_rawsetp
#endif
#endif

#if LUA_VERSION_NUM < 503
/* Before 5.3 every number is a double: an "integer" is a number with an
 * integer value that a lua_Integer (64 bits on LP64) holds. Above 2^53 a
 * double no longer holds every integer, so ids that large lose their exact
 * value on these Luas. */
static inline lua_Integer lq_lua_tointegerx(lua_State *L, int index, int *isnum) {
    lua_Number n = lua_type(L, index) == LUA_TNUMBER ? lua_tonumber(L, index) : 0.5;
    /* The range first: converting a double out of it is undefined. */
    int ok = n >= -9223372036854775808.0 && n < 9223372036854775808.0 &&
             n == (lua_Number)(lua_Integer)n;
    if (isnum) *isnum = ok;
    return ok ? (lua_Integer)n : 0;
}
static inline int lq_lua_isinteger(lua_State *L, int index) {
    int ok = 0;
    (void)lq_lua_tointegerx(L, index, &ok);
    return ok;
}
#undef lua_tointegerx
#define lua_tointegerx lq_lua_tointegerx
#define lua_isinteger lq_lua_isinteger
#endif

/* lua_rawgeti returns the type of the value from 5.3 on. */
static inline int lq_lua_rawgeti(lua_State *L, int index, lua_Integer n) {
#if LUA_VERSION_NUM < 503
    lua_rawgeti(L, index, (int)n);
    return lua_type(L, -1);
#else
    return lua_rawgeti(L, index, n);
#endif
}

#if LUA_VERSION_NUM < 504
#define lua_newuserdatauv(L, size, nuvalue) ((void)(nuvalue), lua_newuserdata(L, (size)))
#endif

#endif
