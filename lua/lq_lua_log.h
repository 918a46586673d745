/* The log shim of the Lua module: the core's log messages, which it sends
 * from any of its threads, are queued here and drained on the Lua state's own
 * thread by lua/libqueue.lua, which hands them to the Lua logger. */
#ifndef LQ_LUA_LOG_H
#define LQ_LUA_LOG_H

#include <lua.h>

/* Called once per Lua state when the module opens: registers a sentinel
 * whose finalizer (at lua_close, after every libqueue object of the state,
 * which were all made later) releases the state's hold on the capture. */
void lq_lua_log_attach(lua_State *L);

/* core.lq_lua_log_capture(min_level | false): with a level (an lq_log_level),
 * installs the queueing sink in the core (process-wide) and keeps messages at
 * or above the level; with false, releases this state's hold, and once no
 * state holds it the core logs to stderr again. Returns nothing. */
int lq_lua_log_capture(lua_State *L);

/* core.lq_lua_log_drain(): nil when nothing is queued, else a list
 * {level1, message1, level2, message2, ...} in arrival order, the oldest
 * first. Messages that did not fit in the queue are reported as one warning. */
int lq_lua_log_drain(lua_State *L);

/* Logs a message of the module's own C code, from any thread, as the core's
 * are: queued for Lua while a state holds the capture, else to stderr. */
void lq_lua_log_post(int level, const char *message);

#endif
