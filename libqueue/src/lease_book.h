/* The lease book: every delivery a subscription has claimed and not yet
 * freed, waiting or in work, so that one keeper can extend all their leases.
 * The book does not own its entries; the caller locks it. */
#ifndef LQ_LEASE_BOOK_H
#define LQ_LEASE_BOOK_H

#include "internal.h"

typedef struct lq_book_entry {
    struct lq_book_entry *prev, *next;
} lq_book_entry;

typedef struct lq_lease_book {
    lq_book_entry head; /* a ring through the sentinel */
    size_t count;
} lq_lease_book;

LQ_HIDDEN void lq__book_init(lq_lease_book *book);
LQ_HIDDEN void lq__book_add(lq_lease_book *book, lq_book_entry *e);
/* Removing an entry that is not in the book does nothing. */
LQ_HIDDEN void lq__book_remove(lq_lease_book *book, lq_book_entry *e);
/* Copies up to `max` entries into `out`, oldest first; returns how many. */
LQ_HIDDEN size_t lq__book_snapshot(const lq_lease_book *book, lq_book_entry **out, size_t max);

#endif
