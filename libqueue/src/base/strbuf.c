#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(lq__strbuf *sb, size_t extra) {
    if (sb->failed) return false;
    if (sb->len + extra + 1 <= sb->cap) return true;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    char *grown = realloc(sb->data, cap);
    if (!grown) {
        sb->failed = true;
        return false;
    }
    sb->data = grown;
    sb->cap = cap;
    return true;
}

void lq__sb_addn(lq__strbuf *sb, const char *s, size_t n) {
    if (!reserve(sb, n)) return;
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void lq__sb_add(lq__strbuf *sb, const char *s) { lq__sb_addn(sb, s, strlen(s)); }

void lq__sb_addc(lq__strbuf *sb, char c) { lq__sb_addn(sb, &c, 1); }

void lq__sb_addf(lq__strbuf *sb, const char *fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && reserve(sb, (size_t)n)) {
        vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, again);
        sb->len += (size_t)n;
    }
    va_end(again);
}

void lq__sb_add_quoted(lq__strbuf *sb, const char *s, char quote) {
    lq__sb_addc(sb, quote);
    for (; *s; s++) {
        if (*s == quote) lq__sb_addc(sb, quote);
        lq__sb_addc(sb, *s);
    }
    lq__sb_addc(sb, quote);
}

char *lq__sb_take(lq__strbuf *sb) {
    char *s = sb->failed ? NULL : sb->data;
    if (!s && !sb->failed) s = lq__strdup("");
    if (sb->failed) free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->failed = false;
    return s;
}

void lq__sb_free(lq__strbuf *sb) {
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->failed = false;
}

size_t lq__int_text(char out[LQ__INT_TEXT_SIZE], int64_t v) {
    /* In unsigned arithmetic, so INT64_MIN negates without overflow. */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t len = v < 0;
    for (uint64_t rest = u; rest >= 10; rest /= 10) len++;
    len++;
    /* The digits from the last, in place. */
    out[len] = '\0';
    char *at = out + len;
    do {
        *--at = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) out[0] = '-';
    return len;
}
