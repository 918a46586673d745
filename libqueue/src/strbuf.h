/* A growable NUL-terminated string. A failed allocation marks the buffer
 * failed, so builders append freely and check once at the end. */
#ifndef LQ_STRBUF_H
#define LQ_STRBUF_H

#include "internal.h"

typedef struct lq_strbuf {
    char *data;
    size_t len, cap;
    bool failed;
} lq_strbuf;

LQ_HIDDEN void lq__sb_add(lq_strbuf *sb, const char *s);
LQ_HIDDEN void lq__sb_addn(lq_strbuf *sb, const char *s, size_t n);
LQ_HIDDEN void lq__sb_addc(lq_strbuf *sb, char c);
LQ_HIDDEN void lq__sb_addf(lq_strbuf *sb, const char *fmt, ...) LQ_PRINTF(2, 3);
/* Appends `s` between `quote` characters, doubling any `quote` inside. */
LQ_HIDDEN void lq__sb_add_quoted(lq_strbuf *sb, const char *s, char quote);
/* Writes `v` in decimal with its NUL into `out` (21 bytes hold any value)
 * and returns its length: the hot paths bind numbers as text, and this costs
 * a fraction of snprintf. */
#define LQ_INT_TEXT_SIZE 21
LQ_HIDDEN size_t lq__int_text(char out[LQ_INT_TEXT_SIZE], int64_t v);
/* Hands the string over (NULL when an allocation failed) and resets `sb`. */
LQ_HIDDEN char *lq__sb_take(lq_strbuf *sb);
LQ_HIDDEN void lq__sb_free(lq_strbuf *sb);

#endif
