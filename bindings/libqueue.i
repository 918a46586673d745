/* SWIG interface of the core Lua module, libqueue.core (libqueue/core.so,
 * whose entry point luaopen_libqueue_core this %module names).
 *
 *     swig -lua -o libqueue_core_wrap.c -I libqueue/include bindings/libqueue.i
 *
 * It %includes libqueue/include/libqueue.h as it is: every public function and
 * constant of the header becomes core.<name> (core.lq_broker_open,
 * core.LQ_ROLE_PAYLOAD, ...). What Lua users require is lua/libqueue.lua, which
 * builds objects, option tables and garbage collection on top of this module.
 *
 * Calling conventions of the generated functions (the typemaps below):
 *   - Out parameters come back as return values, in order:
 *       core.lq_broker_open(url, options)        -> broker
 *       core.lq_option_find(name)                -> option, type
 *       core.lq_delivery_header_at(delivery, i)  -> name, value
 *       core.lq_table_create_sql(table, dialect) -> sql (freed with lq_free here)
 *       core.lq_publish_sql(dialect, table, message, flags) -> rendered (freed by libqueue.lua)
 *       core.lq_publish(broker, table, {m1, m2}) -> {id1, id2}
 *       core.lq_delivery_exec(delivery, sql, {p1, p2, n = 2}) -> changes
 *       core.lq_queue_stats(broker, table, group, cap) -> {due, delayed, ...}
 *       core.lq_queue_prune(broker, table, group, older_than_ms) -> deleted
 *       core.lq_queue_attempts(buckets, broker, table, group, cap) -> {n0, n1, ...}
 *   - A status-returning function (every int result but a few getters)
 *     returns true (no out parameters) or its out values on LQ_OK, and on
 *     failure
 *         nil, message, code_name, sqlstate, native
 *     read from lq_errmsg(), lq_status_name(rc), lq_errcode_sqlstate() and
 *     lq_errcode_native() right after the call.
 *   - Integers are Lua integers both ways (64-bit ids exact; on Lua 5.1 and
 *     LuaJIT, doubles, exact below 2^53); a float without an integer value,
 *     or an int argument out of range, is an argument error.
 *   - Byte data is a Lua string, embedded NULs included.
 *   - Handles are plain pointers here (not owned: nothing is freed by the
 *     garbage collector of this module). libqueue.lua owns and frees them.
 *
 * lq_publish_on takes the caller's own connection as a light userdata (a
 * sqlite3 *, PGconn * or MYSQL * that some other C module hands to Lua); no
 * Lua database binding in Debian gives one out, so libqueue.lua has no
 * method for it.
 *
 * Not exposed: lq_subscription_run and lq_handler_fn (push mode runs handlers
 * on the core's threads; a Lua state is single-threaded, so Lua uses the pull
 * API, lq_subscription_next), lq_free (takes any pointer; the one allocation
 * it frees, create_sql's, is freed by the typemap), and lq_set_log (a C
 * function pointer): the log is routed by the shim in lua/lq_lua_log.c instead.
 */
%module libqueue_core

%{
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include "libqueue.h"
#include "lq_lua_compat.h"
#include "lq_lua_log.h"
#include "lq_lua_settler.h"

/* The module's entry point (defined by SWIG below), declared so that the
 * wrapper compiles cleanly under -Wmissing-prototypes. */
SWIGEXPORT int luaopen_libqueue_core(lua_State *L);

/* Pushes nil, message, code name, sqlstate, native code for a failed call;
 * returns the number of values pushed. Reads the per-thread error state,
 * which must be that of the call just made. */
static int lq_lua_push_failure(lua_State *L, int status) {
    const char *message = lq_errmsg();
    lua_pushnil(L);
    lua_pushstring(L, (message && *message) ? message : lq_status_describe(status));
    lua_pushstring(L, lq_status_name(status));
    lua_pushstring(L, lq_errcode_sqlstate());
    lua_pushinteger(L, (lua_Integer)lq_errcode_native());
    return 5;
}

/* A Lua number with an exact integer value (not a numeric string). */
static int lq_lua_isint(lua_State *L, int index) {
    int ok = 0;
    if (lua_type(L, index) == LUA_TNUMBER) (void)lua_tointegerx(L, index, &ok);
    return ok;
}
%}

/* The header defines LQ_API as a visibility attribute unless already defined:
 * SWIG needs no attribute. */
#define LQ_API

%include <stdint.i>

/* ---------------------------------------------------------------------- */
/* Integers: Lua integers both ways (from Lua 5.3 on; before, doubles, exact
 * below 2^53). SWIG's defaults go through lua_Number (a double) and would
 * lose ids above 2^53 on every Lua. */

%typemap(in, checkfn="lq_lua_isint") int {
    lua_Integer lq_value = lua_tointeger(L, $input);
    SWIG_contract_assert(lq_value >= INT_MIN && lq_value <= INT_MAX,
                         "integer argument out of the range of a C int");
    $1 = ($1_ltype)lq_value;
}
%typemap(in, checkfn="lq_lua_isint") int64_t {
    $1 = (int64_t)lua_tointeger(L, $input);
}
%typemap(in, checkfn="lq_lua_isint") size_t {
    lua_Integer lq_value = lua_tointeger(L, $input);
    SWIG_contract_assert(lq_value >= 0, "size argument must not be negative");
    $1 = (size_t)lq_value;
}
/* Results: int64_t, size_t and enums here; int results are statuses (below). */
%typemap(out) int64_t, size_t, enum SWIGTYPE
%{  lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}

/* ---------------------------------------------------------------------- */
/* Status codes. The header's convention is that every fallible call returns
 * an int status, so an int result is a status unless the function is one of
 * the value getters listed below (a new getter returning int must be added to
 * that list; a new status function needs nothing).
 *
 * On LQ_OK the status typemap pushes true; the first out parameter's argout
 * typemap replaces that true with its value (LQ_DROP_TRUE), so a function
 * with out parameters returns them and one without returns true. On failure
 * it pushes nil, message, code name, sqlstate, native, and the argout
 * typemaps (which test `result`) push nothing. */

%typemap(out) int {
    if (result == LQ_OK) {
        lua_pushboolean(L, 1);
        SWIG_arg++;
    } else {
        SWIG_arg += lq_lua_push_failure(L, result);
    }
}
%typemap(out) int lq_version_number, int lq_errcode, int lq_errcode_native,
              int lq_table_form, int lq_delivery_attempt, int lq_rendered_sql_param_type
%{  lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}
/* A yes or no. */
%typemap(out) int lq_delivery_expired %{  lua_pushboolean(L, $1 != 0); SWIG_arg++; %}
%typemap(out) int lq_delivery_cancelled %{  lua_pushboolean(L, $1 != 0); SWIG_arg++; %}
%typemap(out) int lq_rendered_sql_returns_id %{  lua_pushboolean(L, $1 != 0); SWIG_arg++; %}

#define LQ_DROP_TRUE \
    if (SWIG_arg == 1 && lua_type(L, -1) == LUA_TBOOLEAN) { lua_pop(L, 1); SWIG_arg = 0; }

/* ---------------------------------------------------------------------- */
/* Out handles: `lq_x **out` becomes the return value (an unowned pointer). */

%define LQ_OUT_HANDLE(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *lq_handle = NULL)
%{  $1 = &lq_handle; %}
%typemap(argout) TYPE **out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        SWIG_NewPointerObj(L, lq_handle$argnum, $*descriptor, 0);
        SWIG_arg++;
    }
}
%enddef

LQ_OUT_HANDLE(lq_options)
LQ_OUT_HANDLE(lq_table)
LQ_OUT_HANDLE(lq_broker)
LQ_OUT_HANDLE(lq_message)
LQ_OUT_HANDLE(lq_subscription)
LQ_OUT_HANDLE(lq_delivery)
LQ_OUT_HANDLE(lq_metrics)
LQ_OUT_HANDLE(lq_rendered_sql)

/* lq_option_find: option, type; lq_option_scope_of: the scope;
 * lq_subscription_fd: the descriptor. */
%typemap(in, numinputs=0) int *option_out (int lq_int = 0), int *type_out (int lq_int = 0),
                          int *scope_out (int lq_int = 0), int *fd_out (int lq_int = -1)
%{  $1 = &lq_int; %}
%typemap(argout) int *option_out, int *type_out, int *scope_out, int *fd_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushinteger(L, (lua_Integer)lq_int$argnum);
        SWIG_arg++;
    }
}

/* lq_queue_paused: a boolean. */
%typemap(in, numinputs=0) int *paused_out (int lq_int = 0)
%{  $1 = &lq_int; %}
%typemap(argout) int *paused_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushboolean(L, lq_int$argnum);
        SWIG_arg++;
    }
}

/* lq_delivery_header_at: name, value (copied into Lua strings). */
%typemap(in, numinputs=0) const char **name_out (const char *lq_text = NULL),
                          const char **value_out (const char *lq_text = NULL)
%{  $1 = ($1_ltype)&lq_text; %}
%typemap(argout) const char **name_out, const char **value_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushstring(L, lq_text$argnum);
        SWIG_arg++;
    }
}

/* lq_table_create_sql, lq_redact_url, lq_dead_letters_list: the text as a
 * Lua string; the C copy is freed here. */
%typemap(in, numinputs=0) char **sql_out (char *lq_sql = NULL), char **url_out (char *lq_sql = NULL),
    char **json_out (char *lq_sql = NULL)
%{  $1 = &lq_sql; %}
%typemap(argout) char **sql_out, char **url_out, char **json_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushstring(L, lq_sql$argnum);
        SWIG_arg++;
    }
}
%typemap(freearg) char **sql_out, char **url_out, char **json_out
%{  lq_free(lq_sql$argnum); %}

/* ---------------------------------------------------------------------- */
/* Byte strings. */

/* lq_message_set_payload(message, data, size): one Lua string, NULs and all. */
%typemap(in, checkfn="lua_isstring") (const void *data, size_t size) {
    size_t lq_len = 0;
    $1 = ($1_ltype)lua_tolstring(L, $input, &lq_len);
    $2 = lq_len;
}

/* lq_delivery_payload: a Lua string of lq_delivery_payload_size bytes. */
%typemap(out) const void *lq_delivery_payload {
    size_t lq_len = lq_delivery_payload_size(arg1);
    lua_pushlstring(L, lq_len ? (const char *)$1 : "", lq_len);
    SWIG_arg++;
}

/* lq_rendered_sql_param_data: a Lua string of lq_rendered_sql_param_size
 * bytes, or nil for a parameter that is neither text nor bytes. */
%typemap(out) const void *lq_rendered_sql_param_data {
    if ($1) lua_pushlstring(L, (const char *)$1, lq_rendered_sql_param_size(arg1, arg2));
    else lua_pushnil(L);
    SWIG_arg++;
}

/* ---------------------------------------------------------------------- */
/* lq_publish(ids_out, broker, table, messages, count) is called from Lua as
 * lq_publish(broker, table, {message, ...}) and returns {id, ...}; likewise
 * lq_publish_on(broker, connection, table, {message, ...}). The message array
 * and the id array live in Lua userdata on the stack, so a bad element
 * (reported through SWIG's fail path) leaks nothing. */

%typemap(in, checkfn="lua_istable") (lq_message *const *messages, size_t count) {
    size_t lq_n = (size_t)lua_rawlen(L, $input);
    lq_message **lq_array = (lq_message **)lua_newuserdatauv(L, (lq_n ? lq_n : 1) * sizeof *lq_array, 0);
    for (size_t lq_i = 0; lq_i < lq_n; lq_i++) {
        void *lq_p = NULL;
        lua_rawgeti(L, $input, (lua_Integer)lq_i + 1);
        if (!SWIG_IsOK(SWIG_ConvertPtr(L, -1, &lq_p, $descriptor(lq_message *), 0)) || !lq_p) {
            SWIG_Lua_pushferrstring(L, "Error in $symname: element %d of the message list is a %s, "
                                    "not an lq_message", (int)lq_i + 1, SWIG_Lua_typename(L, -1));
            SWIG_fail;
        }
        lua_pop(L, 1);
        lq_array[lq_i] = (lq_message *)lq_p;
    }
    $1 = ($1_ltype)lq_array;
    $2 = lq_n;
}

/* The ids: one per message. The message list is the last Lua argument of
 * every function taking ids_out (messages and count end their parameter
 * lists), so its length is known before it is converted. */
%typemap(in, numinputs=0) int64_t *ids_out (size_t lq_ids_count = 0) {
    /* Runs before the argument count is checked: read only. */
    int lq_top = lua_gettop(L);
    lq_ids_count = lua_type(L, lq_top) == LUA_TTABLE ? (size_t)lua_rawlen(L, lq_top) : 0;
}
/* Check typemaps run once every argument is converted and checked. */
%typemap(check) int64_t *ids_out
%{  $1 = (int64_t *)lua_newuserdatauv(L, (lq_ids_count$argnum ? lq_ids_count$argnum : 1) * sizeof(int64_t), 0); %}
%typemap(argout) int64_t *ids_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_createtable(L, (int)lq_ids_count$argnum, 0);
        for (size_t lq_i = 0; lq_i < lq_ids_count$argnum; lq_i++) {
            lua_pushinteger(L, (lua_Integer)$1[lq_i]);
            lua_rawseti(L, -2, (lua_Integer)lq_i + 1);
        }
        SWIG_arg++;
    }
}

/* lq_queue_stats(values_out, count, broker, table, group, cap) is called as
 * lq_queue_stats(broker, table, group, cap) and returns the list of every
 * lq_queue_stat, from index 1 (LQ_QUEUE_DUE + 1, ...). */
%typemap(in, numinputs=0) (int64_t *values_out, size_t count)
    (int64_t lq_values[LQ_QUEUE_STAT_COUNT])
%{  $1 = lq_values; $2 = LQ_QUEUE_STAT_COUNT; %}
%typemap(argout) (int64_t *values_out, size_t count) {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_createtable(L, LQ_QUEUE_STAT_COUNT, 0);
        for (int lq_i = 0; lq_i < LQ_QUEUE_STAT_COUNT; lq_i++) {
            lua_pushinteger(L, (lua_Integer)lq_values$argnum[lq_i]);
            lua_rawseti(L, -2, (lua_Integer)lq_i + 1);
        }
        SWIG_arg++;
    }
}
/* lq_queue_attempts(counts_out, buckets, ...) is called with the number of
 * buckets in their place, and returns them as a list from index 1 (the rows
 * of attempt 0). */
%typemap(in, checkfn="lq_lua_isint") (int64_t *counts_out, size_t buckets) {
    lua_Integer lq_n = lua_tointeger(L, $input);
    if (lq_n < 1 || lq_n > 1000) {
        SWIG_Lua_pushferrstring(L, "Error in $symname: buckets must be 1 to 1000");
        SWIG_fail;
    }
    $1 = (int64_t *)lua_newuserdatauv(L, (size_t)lq_n * sizeof(int64_t), 0);
    $2 = (size_t)lq_n;
}
%typemap(argout) (int64_t *counts_out, size_t buckets) {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_createtable(L, (int)$2, 0);
        for (size_t lq_i = 0; lq_i < $2; lq_i++) {
            lua_pushinteger(L, (lua_Integer)$1[lq_i]);
            lua_rawseti(L, -2, (lua_Integer)lq_i + 1);
        }
        SWIG_arg++;
    }
}

/* lq_dead_letters_replay and _purge take a list of ids, or nil for every
 * one, and return how many rows they moved. */
%typemap(in) (int64_t *ids, size_t count) {
    if (lua_isnil(L, $input)) {
        $1 = NULL;
        $2 = 0;
    } else if (lua_istable(L, $input)) {
        size_t lq_n = (size_t)lua_rawlen(L, $input);
        int64_t *lq_ids = (int64_t *)lua_newuserdatauv(L, (lq_n ? lq_n : 1) * sizeof(int64_t), 0);
        for (size_t lq_i = 0; lq_i < lq_n; lq_i++) {
            lua_rawgeti(L, $input, (lua_Integer)lq_i + 1);
            if (!lua_isinteger(L, -1)) {
                SWIG_Lua_pushferrstring(L, "Error in $symname: id %d is not an integer", (int)lq_i + 1);
                SWIG_fail;
            }
            lq_ids[lq_i] = (int64_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
        $1 = lq_ids;
        $2 = lq_n;
        if (lq_n == 0) $1 = NULL; /* an empty list is every one: refused below */
    } else {
        SWIG_Lua_pushferrstring(L, "Error in $symname: ids must be a list of integers or nil");
        SWIG_fail;
    }
}
/* lq_queue_prune and lq_dead_letters_prune return how many rows they deleted. */
%typemap(in, numinputs=0) int64_t *replayed_out (int64_t lq_moved = 0), int64_t *purged_out (int64_t lq_moved = 0),
    int64_t *deleted_out (int64_t lq_moved = 0)
%{  $1 = &lq_moved; %}
%typemap(argout) int64_t *replayed_out, int64_t *purged_out, int64_t *deleted_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushinteger(L, (lua_Integer)lq_moved$argnum);
        SWIG_arg++;
    }
}

/* lq_delivery_exec(changes_out, delivery, sql, params, count) is called as
 * lq_delivery_exec(delivery, sql, {p1, p2, ..., n = count}) and returns the
 * rows changed. Parameters are strings or numbers (sent as text); nil is SQL
 * NULL: give `n` (as table.pack does) when the list has nil holes. */
%typemap(in, checkfn="lua_istable") (const char *const *params, size_t count) {
    size_t lq_n;
    lua_getfield(L, $input, "n");
    lq_n = lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 ? (size_t)lua_tointeger(L, -1)
                                                               : (size_t)lua_rawlen(L, $input);
    lua_pop(L, 1);
    const char **lq_params = (const char **)lua_newuserdatauv(L, (lq_n ? lq_n : 1) * sizeof *lq_params, 0);
    /* Strings stay alive in the parameter table; numbers are converted into
     * a table of their own, kept on the stack for the call. */
    lua_createtable(L, 0, 0);
    int lq_holder = lua_gettop(L);
    for (size_t lq_i = 0; lq_i < lq_n; lq_i++) {
        int lq_type = lq_lua_rawgeti(L, $input, (lua_Integer)lq_i + 1);
        if (lq_type == LUA_TNIL) {
            lq_params[lq_i] = NULL;
            lua_pop(L, 1);
        } else if (lq_type == LUA_TSTRING) {
            lq_params[lq_i] = lua_tostring(L, -1);
            lua_pop(L, 1);
        } else if (lq_type == LUA_TNUMBER) {
#if LUA_VERSION_NUM < 503
            /* A double with an integer value (an id) goes as that integer:
             * lua_tostring's "%.14g" would write 2^53 - 1 as 9.007199254741e+15. */
            if (lua_isinteger(L, -1)) {
                char lq_text[32];
                snprintf(lq_text, sizeof lq_text, "%lld", (long long)lua_tointeger(L, -1));
                lua_pop(L, 1);
                lua_pushstring(L, lq_text);
            }
#endif
            lq_params[lq_i] = lua_tostring(L, -1); /* converts this copy */
            lua_rawseti(L, lq_holder, (lua_Integer)lq_i + 1);
        } else {
            SWIG_Lua_pushferrstring(L, "Error in $symname: parameter %d is a %s (strings, numbers "
                                    "and nil only)", (int)lq_i + 1, SWIG_Lua_typename(L, -1));
            SWIG_fail;
        }
    }
    $1 = ($1_ltype)lq_params;
    $2 = lq_n;
}
%typemap(in, numinputs=0) int64_t *changes_out (int64_t lq_changes = 0)
%{  $1 = &lq_changes; %}
%typemap(argout) int64_t *changes_out {
    if (result == LQ_OK) {
        LQ_DROP_TRUE
        lua_pushinteger(L, (lua_Integer)lq_changes$argnum);
        SWIG_arg++;
    }
}
/* lq_subscription_health: how long claims have failed, after the status's
 * values, also on failure (nil, message, code, sqlstate, native, ms). */
%typemap(in, numinputs=0) int64_t *failing_ms_out (int64_t lq_failing = 0)
%{  $1 = &lq_failing; %}
%typemap(argout) int64_t *failing_ms_out {
    if (result == LQ_OK) LQ_DROP_TRUE
    lua_pushinteger(L, (lua_Integer)lq_failing$argnum);
    SWIG_arg++;
}

/* ---------------------------------------------------------------------- */
/* Left out (see the top of this file). */
%ignore lq_subscription_run;
%ignore lq_handler_fn;
%ignore lq_free;
%ignore lq_set_log;
%ignore lq_log_fn;
/* Wrapped below: SWIG's int64_t is long long, which a const pointer to the
 * C99 int64_t (long on LP64) does not convert to. */
%ignore lq_dead_letters_replay;
%ignore lq_dead_letters_purge;

%include "libqueue.h"

%rename(lq_dead_letters_replay) lq_lua_dead_letters_replay;
%rename(lq_dead_letters_purge) lq_lua_dead_letters_purge;
%inline %{
static int lq_lua_dead_letters_replay(int64_t *replayed_out, lq_broker *broker, const lq_table *table,
                                      const char *group, int64_t *ids, size_t count) {
    return lq_dead_letters_replay(replayed_out, broker, table, group, ids, count);
}
static int lq_lua_dead_letters_purge(int64_t *purged_out, lq_broker *broker, const lq_table *table,
                                     const char *group, int64_t *ids, size_t count) {
    return lq_dead_letters_purge(purged_out, broker, table, group, ids, count);
}
%}

/* ---------------------------------------------------------------------- */
/* The log shim (lua/lq_lua_log.c): the core's messages, queued from any
 * thread, drained on the Lua thread. */
%native(lq_lua_log_drain) int lq_lua_log_drain(lua_State *L);
%native(lq_lua_log_capture) int lq_lua_log_capture(lua_State *L);

/* The settler (lua/lq_lua_settler.c): threads that settle and free the
 * deliveries sub:run hands over. Plain functions: the typemaps above apply
 * (its bool and pointer results are not statuses). */
%include "lq_lua_settler.h"

%init %{
    lq_lua_log_attach(L);
%}
