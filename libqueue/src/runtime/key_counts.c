/* Counts of deliveries in work by partition key (runtime/key_counts.h). */
#include "runtime/key_counts.h"

#include "base/hash.h"

#include <stdlib.h>
#include <string.h>

struct lq__key_count {
    lq__key_count *next;
    int count;
    char key[]; /* NUL-terminated */
};

static size_t hash_of(const char *key) { return (size_t)lq__fnv1a_str(key); }

int lq__key_counts_init(lq__key_counts *kc, size_t expected) {
    kc->bucket_count = expected < 16 ? 16 : expected;
    kc->buckets = calloc(kc->bucket_count, sizeof *kc->buckets);
    return kc->buckets ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

void lq__key_counts_free(lq__key_counts *kc) {
    for (size_t i = 0; kc->buckets && i < kc->bucket_count; i++) {
        for (lq__key_count *e = kc->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    }
    free(kc->buckets);
    kc->buckets = NULL;
}

static lq__key_count **slot_of(const lq__key_counts *kc, const char *key) {
    lq__key_count **p = &kc->buckets[hash_of(key) % kc->bucket_count];
    while (*p && strcmp((*p)->key, key) != 0) p = &(*p)->next;
    return p;
}

int lq__key_counts_get(const lq__key_counts *kc, const char *key) {
    lq__key_count *e = *slot_of(kc, key);
    return e ? e->count : 0;
}

bool lq__key_counts_add(lq__key_counts *kc, const char *key, int delta) {
    lq__key_count **p = slot_of(kc, key);
    if (!*p) {
        if (delta <= 0) return true;
        size_t n = strlen(key) + 1;
        lq__key_count *e = malloc(sizeof *e + n);
        if (!e) return false;
        e->next = NULL;
        e->count = 0;
        memcpy(e->key, key, n);
        *p = e;
    }
    (*p)->count += delta;
    if ((*p)->count <= 0) {
        lq__key_count *gone = *p;
        *p = gone->next;
        free(gone);
    }
    return true;
}
