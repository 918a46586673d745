#include "runtime/lease_book.h"

void lq__book_init(lq__lease_book *book) {
    book->head.prev = book->head.next = &book->head;
    book->count = 0;
}

void lq__book_add(lq__lease_book *book, lq__book_entry *e) {
    e->prev = book->head.prev;
    e->next = &book->head;
    book->head.prev->next = e;
    book->head.prev = e;
    book->count++;
}

void lq__book_remove(lq__lease_book *book, lq__book_entry *e) {
    if (!e->next) return;
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
    book->count--;
}

size_t lq__book_snapshot(const lq__lease_book *book, lq__book_entry **out, size_t max) {
    size_t n = 0;
    for (lq__book_entry *e = book->head.next; e != &book->head && n < max; e = e->next) out[n++] = e;
    return n;
}
