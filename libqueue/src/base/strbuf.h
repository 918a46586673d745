/* A growable NUL-terminated string. A failed allocation marks the buffer
 * failed, so builders append freely and check once at the end. */
#ifndef LQ_STRBUF_H
#define LQ_STRBUF_H

#include "base/internal.h"

typedef struct lq__strbuf {
    char *data;
    size_t len, cap;
    bool failed;
} lq__strbuf;

LQ__HIDDEN void lq__sb_add(lq__strbuf *sb, const char *s);
LQ__HIDDEN void lq__sb_addn(lq__strbuf *sb, const char *s, size_t n);
LQ__HIDDEN void lq__sb_addc(lq__strbuf *sb, char c);
LQ__HIDDEN void lq__sb_addf(lq__strbuf *sb, const char *fmt, ...) LQ__PRINTF(2, 3);
/* Appends `s` between `quote` characters, doubling any `quote` inside. */
LQ__HIDDEN void lq__sb_add_quoted(lq__strbuf *sb, const char *s, char quote);
/* Writes `v` in decimal with its NUL into `out` (21 bytes hold any value)
 * and returns its length: the hot paths bind numbers as text, and this costs
 * a fraction of snprintf. */
#define LQ__INT_TEXT_SIZE 21
LQ__HIDDEN size_t lq__int_text(char out[LQ__INT_TEXT_SIZE], int64_t v);
/* Hands the string over (NULL when an allocation failed) and resets `sb`. */
LQ__HIDDEN char *lq__sb_take(lq__strbuf *sb);
LQ__HIDDEN void lq__sb_free(lq__strbuf *sb);

#endif
