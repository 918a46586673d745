/* Credentials never shown: a URL as the library and its bindings print it,
 * and messages scrubbed of a connection's password. */
#include "base/redact.h"

#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Query parameters whose values are secrets (libpq's and Connector/C's). */
static const char *const secret_params[] = {"password", "sslpassword", "tls_passphrase", NULL};

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A parameter's name is compared decoded (tls%5Fpassphrase is
 * tls_passphrase, as the parsers read it); one too long for any secret name
 * is none. */
static bool is_secret_param(const char *name, size_t n) {
    char decoded[32];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k == sizeof decoded - 1) return false;
        int hi, lo;
        if (name[i] == '%' && i + 2 < n && (hi = hex_value(name[i + 1])) >= 0 &&
            (lo = hex_value(name[i + 2])) >= 0) {
            decoded[k++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            decoded[k++] = name[i];
        }
    }
    decoded[k] = '\0';
    for (const char *const *p = secret_params; *p; p++)
        if (strcasecmp(decoded, *p) == 0) return true;
    return false;
}

/* Copies `query` ("a=1&password=x"), each secret value as "***". */
static void add_query(lq__strbuf *sb, const char *query) {
    while (*query) {
        size_t len = strcspn(query, "&");
        const char *eq = memchr(query, '=', len);
        if (eq && is_secret_param(query, (size_t)(eq - query))) {
            lq__sb_addn(sb, query, (size_t)(eq + 1 - query));
            lq__sb_add(sb, "***");
        } else {
            lq__sb_addn(sb, query, len);
        }
        query += len;
        if (*query == '&') lq__sb_addc(sb, *query++);
    }
}

#define SPACE " \t\n\r\f\v"

/* The end of a key=value string's value: up to its closing quote, or to the
 * next space, a backslash escaping the character after it. */
static const char *value_end(const char *v) {
    bool quoted = *v == '\'';
    const char *p = quoted ? v + 1 : v;
    while (*p && (quoted ? *p != '\'' : !strchr(SPACE, *p))) p += p[0] == '\\' && p[1] ? 2 : 1;
    return quoted && *p ? p + 1 : p;
}

/* Copies a libpq key=value string ("host=h password='x y'"), each secret
 * value as "***", quoted or not. */
static void add_key_values(lq__strbuf *sb, const char *text) {
    const char *p = text;
    while (*p) {
        const char *name = p + strspn(p, SPACE);
        size_t name_len = strcspn(name, "=" SPACE);
        const char *eq = name + name_len + strspn(name + name_len, SPACE);
        if (*eq != '=') { /* not key=value: the rest as it is */
            lq__sb_add(sb, p);
            return;
        }
        const char *v = eq + 1 + strspn(eq + 1, SPACE);
        const char *end = value_end(v);
        lq__sb_addn(sb, p, (size_t)(v - p));
        if (is_secret_param(name, name_len) && end > v) lq__sb_add(sb, "***");
        else lq__sb_addn(sb, v, (size_t)(end - v));
        p = end;
    }
}

/* The last '@' of the first n bytes of `text`, or NULL. */
static const char *last_at(const char *text, size_t n) {
    const char *at = NULL;
    for (const char *p = text; p < text + n; p++)
        if (*p == '@') at = p;
    return at;
}

char *lq__redact_url(const char *url) {
    lq__strbuf sb = {0};
    if (url[strcspn(url, ":=@/?&")] == '=') { /* no scheme: a key=value string */
        add_key_values(&sb, url);
        return lq__sb_take(&sb);
    }
    const char *rest = url;
    size_t scheme = strcspn(url, ":/?@");
    if (url[scheme] == ':') {
        /* The user info follows the slashes, however many ("mysql:/u:pw@h"
         * too); with none, it may begin the text ("u:pw@h/db"). */
        const char *after = url + scheme + 1;
        const char *authority = *after == '/' ? after + strspn(after, "/") : url;
        /* It ends at the last '@' before the path, as libpq reads it, or else
         * before the query (a password may hold an '@', a '/', a '?' or a
         * '#', percent-encoded or not: better too much hidden than a
         * password shown). */
        const char *at = last_at(authority, strcspn(authority, "/"));
        if (!at) at = last_at(authority, strcspn(authority, "?"));
        const char *colon = at ? memchr(authority, ':', (size_t)(at - authority)) : NULL;
        if (colon) {
            lq__sb_addn(&sb, url, (size_t)(colon + 1 - url));
            lq__sb_add(&sb, "***");
            rest = at;
        }
    }
    const char *q = strchr(rest, '?');
    if (q) {
        lq__sb_addn(&sb, rest, (size_t)(q + 1 - rest));
        add_query(&sb, q + 1);
    } else {
        lq__sb_add(&sb, rest);
    }
    return lq__sb_take(&sb);
}

int lq_redact_url(char **url_out, const char *url) {
    lq__error_clear();
    LQ__CHECK_ARG(url_out && url, "an argument is NULL");
    *url_out = lq__redact_url(url);
    return *url_out ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

/* `text` with every `secret` in it as "***", cut to `size` bytes. */
static void scrub(char *text, size_t size, const char *secret) {
    size_t n = strlen(secret);
    char out[LQ__ERRMSG_SIZE];
    size_t at = 0;
    for (const char *p = text; *p && at + 1 < sizeof out;) {
        if (strncmp(p, secret, n) == 0) {
            for (const char *r = "***"; *r && at + 1 < sizeof out; r++) out[at++] = *r;
            p += n;
        } else {
            out[at++] = *p++;
        }
    }
    out[at] = '\0';
    snprintf(text, size, "%s", out);
}

void lq__error_redact(const char *secret) {
    if (!secret || !*secret) return;
    lq__error_copy e;
    lq__error_save(&e);
    scrub(e.message, sizeof e.message, secret);
    lq__error_restore(&e);
}
