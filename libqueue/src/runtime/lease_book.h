/* The lease book: every delivery a subscription has claimed and not yet
 * freed, waiting or in work, so that one keeper can extend all their leases.
 * The book does not own its entries; the caller locks it. */
#ifndef LQ_LEASE_BOOK_H
#define LQ_LEASE_BOOK_H

#include "base/internal.h"

typedef struct lq__book_entry {
    struct lq__book_entry *prev, *next;
} lq__book_entry;

typedef struct lq__lease_book {
    lq__book_entry head; /* a ring through the sentinel */
    size_t count;
} lq__lease_book;

LQ__HIDDEN void lq__book_init(lq__lease_book *book);
LQ__HIDDEN void lq__book_add(lq__lease_book *book, lq__book_entry *e);
/* Removing an entry that is not in the book does nothing. */
LQ__HIDDEN void lq__book_remove(lq__lease_book *book, lq__book_entry *e);
/* Copies up to `max` entries into `out`, oldest first; returns how many. */
LQ__HIDDEN size_t lq__book_snapshot(const lq__lease_book *book, lq__book_entry **out, size_t max);

#endif
