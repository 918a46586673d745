#include "base/headers.h"
#include "base/json_out.h"

#include <stdlib.h>
#include <string.h>

int lq__headers_set(lq__headers *h, const char *name, const char *value) {
    char *v = lq__strdup(value);
    if (!v) return lq__error(LQ_NOMEM, "out of memory");
    for (size_t i = 0; i < h->count; i++) {
        if (strcmp(h->names[i], name) == 0) {
            free(h->values[i]);
            h->values[i] = v;
            return LQ_OK;
        }
    }
    if (h->count == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4;
        char **names = realloc(h->names, cap * sizeof *names);
        if (names) h->names = names;
        char **values = names ? realloc(h->values, cap * sizeof *values) : NULL;
        if (values) h->values = values;
        if (!names || !values) {
            free(v);
            return lq__error(LQ_NOMEM, "out of memory");
        }
        h->cap = cap;
    }
    char *n = lq__strdup(name);
    if (!n) {
        free(v);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    h->names[h->count] = n;
    h->values[h->count] = v;
    h->count++;
    return LQ_OK;
}

const char *lq__headers_get(const lq__headers *h, const char *name) {
    for (size_t i = 0; i < h->count; i++)
        if (strcmp(h->names[i], name) == 0) return h->values[i];
    return NULL;
}

void lq__headers_clear(lq__headers *h) {
    for (size_t i = 0; i < h->count; i++) {
        free(h->names[i]);
        free(h->values[i]);
    }
    free(h->names);
    free(h->values);
    memset(h, 0, sizeof *h);
}

void lq__headers_to_json(lq__strbuf *out, const lq__headers *h) {
    lq__sb_addc(out, '{');
    for (size_t i = 0; i < h->count; i++) {
        if (i) lq__sb_addc(out, ',');
        lq__json_string(out, h->names[i], strlen(h->names[i]));
        lq__sb_addc(out, ':');
        lq__json_string(out, h->values[i], strlen(h->values[i]));
    }
    lq__sb_addc(out, '}');
}

/* A small reader for one flat JSON object. */
typedef struct reader {
    const char *p, *end;
} reader;

static void skip_space(reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static void add_utf8(lq__strbuf *sb, unsigned cp) {
    if (cp < 0x80) {
        lq__sb_addc(sb, (char)cp);
    } else if (cp < 0x800) {
        lq__sb_addc(sb, (char)(0xC0 | (cp >> 6)));
        lq__sb_addc(sb, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        lq__sb_addc(sb, (char)(0xE0 | (cp >> 12)));
        lq__sb_addc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
        lq__sb_addc(sb, (char)(0x80 | (cp & 0x3F)));
    } else {
        lq__sb_addc(sb, (char)(0xF0 | (cp >> 18)));
        lq__sb_addc(sb, (char)(0x80 | ((cp >> 12) & 0x3F)));
        lq__sb_addc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
        lq__sb_addc(sb, (char)(0x80 | (cp & 0x3F)));
    }
}

static bool read_hex4(reader *r, unsigned *out) {
    if (r->end - r->p < 4) return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return false;
    }
    *out = v;
    return true;
}

/* The code point of a \uXXXX escape (its "\u" read), joined with the low
 * half that follows a high surrogate. A half without its other is U+FFFD,
 * and what follows it is read on its own. */
static bool read_code_point(reader *r, unsigned *cp) {
    if (!read_hex4(r, cp)) return false;
    if (*cp < 0xD800 || *cp >= 0xE000) return true;
    unsigned low;
    reader next = *r;
    if (*cp < 0xDC00 && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
        next.p += 2;
        if (read_hex4(&next, &low) && low >= 0xDC00 && low < 0xE000) {
            *r = next;
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
            return true;
        }
    }
    *cp = 0xFFFD;
    return true;
}

/* A JSON string. A NUL in it, raw or \u0000, fails: a header is a C string,
 * and cutting it there would give another name or value. */
static char *read_string(reader *r) {
    lq__strbuf sb = {0};
    if (r->p >= r->end || *r->p != '"') return NULL;
    r->p++;
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if (c == '\0') goto fail;
        if (c != '\\') {
            lq__sb_addc(&sb, c);
            continue;
        }
        if (r->p >= r->end) break;
        c = *r->p++;
        unsigned cp;
        switch (c) {
        case '"':
        case '\\':
        case '/': lq__sb_addc(&sb, c); break;
        case 'n': lq__sb_addc(&sb, '\n'); break;
        case 't': lq__sb_addc(&sb, '\t'); break;
        case 'r': lq__sb_addc(&sb, '\r'); break;
        case 'b': lq__sb_addc(&sb, '\b'); break;
        case 'f': lq__sb_addc(&sb, '\f'); break;
        case 'u':
            if (!read_code_point(r, &cp) || cp == 0) goto fail;
            add_utf8(&sb, cp);
            break;
        default: goto fail; /* not a JSON escape */
        }
    }
    if (r->p >= r->end) goto fail;
    r->p++;
    return lq__sb_take(&sb);
fail:
    lq__sb_free(&sb);
    return NULL;
}

/* The index past the digits from s[i]. */
static size_t skip_digits(const char *s, size_t n, size_t i) {
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i;
}

/* Whether s[0..n) is a JSON number. */
static bool is_number(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    size_t whole = i;
    i = skip_digits(s, n, i);
    if (i == whole || (s[whole] == '0' && i > whole + 1)) return false; /* no leading zero */
    if (i < n && s[i] == '.') {
        size_t fraction = ++i;
        i = skip_digits(s, n, i);
        if (i == fraction) return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exponent = i;
        i = skip_digits(s, n, i);
        if (i == exponent) return false;
    }
    return i == n;
}

static bool is_word(const char *s, size_t n, const char *word) {
    return n == strlen(word) && memcmp(s, word, n) == 0;
}

/* A bare value kept as its text: a number, true, false or null. Anything
 * else fails, an object or an array among them: read as text up to its
 * first ',' or '}', it would lose the rest of the headers. */
static char *read_bare(reader *r) {
    const char *start = r->p;
    while (r->p < r->end && *r->p != ',' && *r->p != '}' && *r->p != ' ' && *r->p != '\t' &&
           *r->p != '\n' && *r->p != '\r')
        r->p++;
    size_t n = (size_t)(r->p - start);
    if (!is_number(start, n) && !is_word(start, n, "true") && !is_word(start, n, "false") &&
        !is_word(start, n, "null"))
        return NULL;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, start, n);
    s[n] = '\0';
    return s;
}

int lq__headers_from_json(lq__headers *h, const char *json, size_t len) {
    reader r = {json, json + len};
    skip_space(&r);
    if (r.p >= r.end || *r.p != '{') goto bad;
    r.p++;
    skip_space(&r);
    if (r.p < r.end && *r.p == '}') goto end;
    for (;;) {
        skip_space(&r);
        char *name = read_string(&r);
        if (!name) goto bad;
        skip_space(&r);
        if (r.p >= r.end || *r.p != ':') {
            free(name);
            goto bad;
        }
        r.p++;
        skip_space(&r);
        char *value = (r.p < r.end && *r.p == '"') ? read_string(&r) : read_bare(&r);
        int rc = value ? lq__headers_set(h, name, value) : LQ_BACKEND;
        free(name);
        free(value);
        if (rc != LQ_OK) goto bad;
        skip_space(&r);
        if (r.p < r.end && *r.p == ',') {
            r.p++;
            continue;
        }
        if (r.p < r.end && *r.p == '}') goto end;
        goto bad;
    }
end:
    /* Nothing but whitespace after the object. */
    r.p++;
    skip_space(&r);
    if (r.p == r.end) return LQ_OK;
bad:
    lq__headers_clear(h);
    return lq__error(LQ_BACKEND, "the headers column holds something other than a JSON object");
}
