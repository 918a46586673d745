/* The lease book: entries come and go in any order; the snapshot sees the
 * ones present, oldest first. */
#include "check.h"
#include "runtime/lease_book.h"

int main(void) {
    lq__lease_book book;
    lq__book_entry e[4] = {{0}};
    lq__book_entry *out[8];
    lq__book_init(&book);
    CHECK(lq__book_snapshot(&book, out, 8) == 0);
    for (int i = 0; i < 4; i++) lq__book_add(&book, &e[i]);
    CHECK(book.count == 4);
    lq__book_remove(&book, &e[1]);
    lq__book_remove(&book, &e[1]); /* twice: no effect */
    CHECK(book.count == 3);
    CHECK(lq__book_snapshot(&book, out, 8) == 3);
    CHECK(out[0] == &e[0] && out[1] == &e[2] && out[2] == &e[3]);
    CHECK(lq__book_snapshot(&book, out, 2) == 2);
    lq__book_remove(&book, &e[0]);
    lq__book_remove(&book, &e[3]);
    lq__book_add(&book, &e[1]);
    CHECK(lq__book_snapshot(&book, out, 8) == 2);
    CHECK(out[0] == &e[2] && out[1] == &e[1]);
    CHECK_DONE();
}
