#include "dialects/keys.h"

#include "base/hash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024

typedef struct entry {
    struct entry *next;
    char *space;
    char *key;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *buckets[BUCKETS];

static size_t hash(const char *space, const char *key) {
    static const unsigned char between = 0xff; /* a byte no name holds: ("ab", "c") is not ("a", "bc") */
    uint64_t h = lq__fnv1a(lq__fnv1a_str(space), &between, 1);
    h = lq__fnv1a(h, key, strlen(key));
    return (size_t)(h % BUCKETS);
}

static entry **find(const char *space, const char *key) {
    entry **e = &buckets[hash(space, key)];
    while (*e && (strcmp((*e)->key, key) != 0 || strcmp((*e)->space, space) != 0)) e = &(*e)->next;
    return e;
}

int lq__keys_try_lock(bool *taken, const char *space, const char *key) {
    pthread_mutex_lock(&lock);
    entry **slot = find(space, key);
    *taken = false;
    int rc = LQ_OK;
    if (!*slot) {
        entry *e = malloc(sizeof *e);
        char *s = lq__strdup(space), *k = lq__strdup(key);
        if (!e || !s || !k) {
            free(e);
            free(s);
            free(k);
            rc = lq__error(LQ_NOMEM, "out of memory");
        } else {
            e->next = NULL;
            e->space = s;
            e->key = k;
            *slot = e;
            *taken = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

bool lq__keys_unlock(const char *space, const char *key) {
    pthread_mutex_lock(&lock);
    entry **slot = find(space, key);
    entry *e = *slot;
    if (e) *slot = e->next;
    pthread_mutex_unlock(&lock);
    if (!e) return false;
    free(e->space);
    free(e->key);
    free(e);
    return true;
}

size_t lq__keys_held(const char *space) {
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < BUCKETS; i++)
        for (entry *e = buckets[i]; e; e = e->next)
            if (strcmp(e->space, space) == 0) n++;
    pthread_mutex_unlock(&lock);
    return n;
}
