/* libFuzzer target for the headers reader (lq__headers_from_json). Besides
 * crashes and sanitizer reports it aborts on a wrong reading:
 *  - it accepts what check_object below accepts, and nothing else;
 *  - what it read, written by lq__headers_to_json and read again, gives the
 *    same headers;
 *  - the same text with other whitespace between tokens gives the same
 *    headers;
 *  - from a text all ASCII, every name and value is valid UTF-8;
 *  - headers made of the input's bytes come back the same from the writer's
 *    JSON (the writer and the reader agree on every byte). */
#include "base/headers.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_headers: %s\n", what);
    abort();
}

/* ------------------------------------------------------------------------ */
/* The text the reader takes: a JSON object (RFC 8259) whose values are
 * strings, numbers, true, false or null. Strings may hold any byte but NUL,
 * raw or as \u0000 (a header is a C string); lone surrogate escapes are
 * taken (the reader writes U+FFFD). Written apart from headers.c so that
 * the two can disagree. */

typedef struct text {
    const char *p, *start, *end;
    char *spaced; /* NULL, or a copy of the text: its whitespace between tokens made ' ' */
} text;

static void ws(text *t) {
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\t' || *t->p == '\n' || *t->p == '\r')) {
        if (t->spaced) t->spaced[t->p - t->start] = ' ';
        t->p++;
    }
}

static int hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int check_string(text *t) {
    if (t->p == t->end || *t->p++ != '"') return 0;
    while (t->p < t->end) {
        char c = *t->p++;
        if (c == '"') return 1;
        if (c == '\0') return 0;
        if (c != '\\') continue;
        if (t->p == t->end) return 0;
        c = *t->p++;
        if (c == 'u') {
            if (t->end - t->p < 4 || !hex(t->p[0]) || !hex(t->p[1]) || !hex(t->p[2]) ||
                !hex(t->p[3]) || memcmp(t->p, "0000", 4) == 0)
                return 0;
            t->p += 4;
        } else if (!c || !strchr("\"\\/bfnrt", c)) {
            return 0;
        }
    }
    return 0;
}

static int digits(text *t) {
    const char *start = t->p;
    while (t->p < t->end && *t->p >= '0' && *t->p <= '9') t->p++;
    return t->p > start;
}

static int check_number(text *t) {
    if (t->p < t->end && *t->p == '-') t->p++;
    if (t->p < t->end && *t->p == '0') t->p++;
    else if (!(t->p < t->end && *t->p >= '1' && *t->p <= '9') || !digits(t)) return 0;
    if (t->p < t->end && *t->p == '.') {
        t->p++;
        if (!digits(t)) return 0;
    }
    if (t->p < t->end && (*t->p == 'e' || *t->p == 'E')) {
        t->p++;
        if (t->p < t->end && (*t->p == '+' || *t->p == '-')) t->p++;
        if (!digits(t)) return 0;
    }
    return 1;
}

static int check_word(text *t, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(t->end - t->p) < n || memcmp(t->p, word, n) != 0) return 0;
    t->p += n;
    return 1;
}

static int check_value(text *t) {
    if (t->p == t->end) return 0;
    switch (*t->p) {
    case '"': return check_string(t);
    case 't': return check_word(t, "true");
    case 'f': return check_word(t, "false");
    case 'n': return check_word(t, "null");
    default: return check_number(t);
    }
}

static int check_object(const char *json, size_t len, char *spaced) {
    text t = {json, json, json + len, spaced};
    ws(&t);
    if (t.p == t.end || *t.p++ != '{') return 0;
    ws(&t);
    if (t.p < t.end && *t.p == '}') {
        t.p++;
    } else {
        for (;;) {
            ws(&t);
            if (!check_string(&t)) return 0;
            ws(&t);
            if (t.p == t.end || *t.p++ != ':') return 0;
            ws(&t);
            if (!check_value(&t)) return 0;
            ws(&t);
            if (t.p == t.end) return 0;
            char c = *t.p++;
            if (c == '}') break;
            if (c != ',') return 0;
        }
    }
    ws(&t);
    return t.p == t.end;
}

/* ------------------------------------------------------------------------ */

static int valid_utf8(const char *text) {
    static const unsigned least[] = {0, 0x80, 0x800, 0x10000}; /* shortest form */
    for (const unsigned char *s = (const unsigned char *)text; *s;) {
        unsigned c = *s++;
        if (c < 0x80) continue;
        unsigned more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        if (!more || c >= 0xF8) return 0;
        unsigned cp = c & (0x3Fu >> more);
        for (unsigned i = 0; i < more; i++, s++) {
            if ((*s & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (*s & 0x3Fu);
        }
        if (cp < least[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
    }
    return 1;
}

static void same(const lq__headers *a, const lq__headers *b, const char *what) {
    if (a->count != b->count) fail(what);
    for (size_t i = 0; i < a->count; i++)
        if (strcmp(a->names[i], b->names[i]) != 0 || strcmp(a->values[i], b->values[i]) != 0)
            fail(what);
}

/* Writes `h`, reads it back, and compares. */
static void round_trip(const lq__headers *h, const char *what) {
    lq__strbuf json = {0};
    lq__headers_to_json(&json, h);
    if (json.failed) fail("out of memory");
    if (!check_object(json.data, json.len, NULL)) fail("the writer's JSON is not a headers object");
    lq__headers back = {0};
    if (lq__headers_from_json(&back, json.data, json.len) != LQ_OK)
        fail("the writer's JSON does not read back");
    same(h, &back, what);
    lq__headers_clear(&back);
    lq__sb_free(&json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *json = (const char *)data;
    char *spaced = malloc(size + 1);
    if (!spaced) fail("out of memory");
    memcpy(spaced, json, size);
    lq__headers h = {0};
    int rc = lq__headers_from_json(&h, json, size);
    if (rc != LQ_OK && rc != LQ_BACKEND) fail("an unexpected status");
    if ((rc == LQ_OK) != check_object(json, size, spaced))
        fail(rc == LQ_OK ? "read what is not a headers object" : "refused a headers object");
    if (rc == LQ_OK) {
        round_trip(&h, "read, written and read again: other headers");
        lq__headers other = {0};
        if (lq__headers_from_json(&other, spaced, size) != LQ_OK)
            fail("other whitespace between tokens: refused");
        same(&h, &other, "other whitespace between tokens: other headers");
        lq__headers_clear(&other);
        bool ascii = true;
        for (size_t i = 0; i < size; i++) ascii = ascii && data[i] < 0x80;
        for (size_t i = 0; ascii && i < h.count; i++)
            if (!valid_utf8(h.names[i]) || !valid_utf8(h.values[i]))
                fail("escapes read as invalid UTF-8");
    }
    lq__headers_clear(&h);
    free(spaced);

    /* The bytes as NUL-separated names and values. */
    lq__headers made = {0};
    for (size_t at = 0; at < size;) {
        char *name = strndup(json + at, size - at);
        if (!name) fail("out of memory");
        at += strlen(name) + 1;
        char *value = at < size ? strndup(json + at, size - at) : strdup("");
        if (!value) fail("out of memory");
        at += strlen(value) + 1;
        if (lq__headers_set(&made, name, value) != LQ_OK) fail("out of memory");
        free(name);
        free(value);
    }
    round_trip(&made, "written and read: other headers");
    lq__headers_clear(&made);
    return 0;
}
