/* The log shim of the Lua module (see lq_lua_log.h).
 *
 * The core calls its log sink from any of its threads, never with a library
 * lock held, and a Lua state may only be entered from its own thread. So the
 * sink only copies each message into a bounded, mutex-protected queue; Lua
 * drains the queue on its own thread at each call into the binding.
 *
 * The sink is process-wide (lq_set_log has one slot), so the queue is too:
 * with several Lua states in one process, whichever drains first gets the
 * messages. A state holds the capture from lq_lua_log_capture(level) until
 * lq_lua_log_capture(false) or its lua_close; the sink is removed when no
 * state holds it, and the core logs to stderr again.
 */
#include "lq_lua_log.h"

#include <lauxlib.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libqueue.h"
#include "lq_lua_compat.h"

/* Most messages kept between two drains; more are counted, not kept. */
#define LQ_LUA_LOG_MAX 1000

typedef struct log_entry {
    struct log_entry *next;
    int level;
    char message[]; /* NUL-terminated copy */
} log_entry;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static log_entry *log_head;
static log_entry *log_tail;
static size_t log_count;
static size_t log_dropped;
static int log_min_level = LQ_LOG_WARNING;
static int log_holders; /* Lua states holding the capture */

/* Per-state registry key of the sentinel. */
static const char sentinel_key = 0;

typedef struct {
    int holding; /* this state holds the capture */
} log_sentinel;

/* Queues a message; false when no state holds the capture. */
static bool enqueue(int level, const char *message) {
    size_t len = message ? strlen(message) : 0;
    pthread_mutex_lock(&log_lock);
    if (log_holders == 0) {
        pthread_mutex_unlock(&log_lock);
        return false;
    }
    if (level < log_min_level) {
        pthread_mutex_unlock(&log_lock);
        return true;
    }
    if (log_count >= LQ_LUA_LOG_MAX) {
        log_dropped++;
        pthread_mutex_unlock(&log_lock);
        return true;
    }
    pthread_mutex_unlock(&log_lock);

    log_entry *entry = malloc(sizeof *entry + len + 1);
    if (!entry) {
        pthread_mutex_lock(&log_lock);
        log_dropped++;
        pthread_mutex_unlock(&log_lock);
        return true;
    }
    entry->next = NULL;
    entry->level = level;
    if (len) memcpy(entry->message, message, len);
    entry->message[len] = '\0';

    pthread_mutex_lock(&log_lock);
    if (log_tail) {
        log_tail->next = entry;
    } else {
        log_head = entry;
    }
    log_tail = entry;
    log_count++;
    pthread_mutex_unlock(&log_lock);
    return true;
}

static void log_sink(int level, const char *message, void *userdata) {
    (void)userdata;
    enqueue(level, message);
}

void lq_lua_log_post(int level, const char *message) {
    /* Without the capture the core logs to stderr (or to an embedder's sink,
     * which this module cannot reach): stderr, in the core's words. */
    if (!enqueue(level, message) && level >= LQ_LOG_WARNING)
        fprintf(stderr, "libqueue %s: %s\n", level >= LQ_LOG_ERROR ? "error" : "warning",
                message ? message : "");
}

/* Takes the whole queue; the caller frees it. */
static log_entry *take_all(size_t *dropped) {
    pthread_mutex_lock(&log_lock);
    log_entry *all = log_head;
    log_head = log_tail = NULL;
    log_count = 0;
    *dropped = log_dropped;
    log_dropped = 0;
    pthread_mutex_unlock(&log_lock);
    return all;
}

static void free_all(log_entry *entry) {
    while (entry) {
        log_entry *next = entry->next;
        free(entry);
        entry = next;
    }
}

static void hold(log_sentinel *sentinel, int min_level) {
    int install = 0;
    pthread_mutex_lock(&log_lock);
    log_min_level = min_level;
    if (!sentinel->holding) {
        sentinel->holding = 1;
        install = log_holders++ == 0;
    }
    pthread_mutex_unlock(&log_lock);
    if (install) lq_set_log(log_sink, NULL);
}

static void release(log_sentinel *sentinel) {
    int uninstall = 0;
    pthread_mutex_lock(&log_lock);
    if (sentinel->holding) {
        sentinel->holding = 0;
        uninstall = --log_holders == 0;
    }
    pthread_mutex_unlock(&log_lock);
    if (uninstall) {
        size_t dropped;
        lq_set_log(NULL, NULL);
        free_all(take_all(&dropped));
    }
}

static int sentinel_gc(lua_State *L) {
    log_sentinel *sentinel = lua_touserdata(L, 1);
    if (sentinel) release(sentinel);
    return 0;
}

static log_sentinel *get_sentinel(lua_State *L) {
    log_sentinel *sentinel;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &sentinel_key);
    sentinel = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return sentinel;
}

void lq_lua_log_attach(lua_State *L) {
    if (get_sentinel(L)) return;
    log_sentinel *sentinel = lua_newuserdatauv(L, sizeof *sentinel, 0);
    sentinel->holding = 0;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &sentinel_key);
}

int lq_lua_log_capture(lua_State *L) {
    log_sentinel *sentinel = get_sentinel(L);
    if (!sentinel) return luaL_error(L, "libqueue_core: log shim not attached");
    if (lua_isboolean(L, 1) && !lua_toboolean(L, 1)) {
        release(sentinel);
    } else {
        lua_Integer level = luaL_checkinteger(L, 1);
        hold(sentinel, (int)(level < 0 ? 0 : level > 1000 ? 1000 : level));
    }
    return 0;
}

/* Pops the oldest entry, or NULL. */
static log_entry *pop(size_t *dropped) {
    pthread_mutex_lock(&log_lock);
    log_entry *entry = log_head;
    if (entry) {
        log_head = entry->next;
        if (!log_head) log_tail = NULL;
        log_count--;
    }
    *dropped += log_dropped;
    log_dropped = 0;
    pthread_mutex_unlock(&log_lock);
    return entry;
}

int lq_lua_log_drain(lua_State *L) {
    size_t dropped = 0, limit;
    /* Cheap when empty: the usual case, checked on every binding call. */
    pthread_mutex_lock(&log_lock);
    limit = log_count;
    int empty = log_count == 0 && log_dropped == 0;
    pthread_mutex_unlock(&log_lock);
    if (empty) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, (int)(2 * limit + 2), 0);
    lua_Integer n = 0;
    /* One entry at a time, so the rest stays queued (and freed by the last
     * release) if a Lua allocation fails; at most `limit` entries, so a
     * flood from the core's threads cannot keep this loop going. */
    for (size_t i = 0; i < limit; i++) {
        log_entry *entry = pop(&dropped);
        if (!entry) break;
        lua_pushinteger(L, entry->level);
        lua_rawseti(L, -2, ++n);
        lua_pushstring(L, entry->message);
        free(entry);
        lua_rawseti(L, -2, ++n);
    }
    if (limit == 0) {
        pthread_mutex_lock(&log_lock);
        dropped += log_dropped;
        log_dropped = 0;
        pthread_mutex_unlock(&log_lock);
    }
    if (dropped) {
        lua_pushinteger(L, LQ_LOG_WARNING);
        lua_rawseti(L, -2, ++n);
        char text[96];
        snprintf(text, sizeof text, "%zu log messages of the core were dropped (the queue holds %d)",
                 dropped, LQ_LUA_LOG_MAX);
        lua_pushstring(L, text);
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}
