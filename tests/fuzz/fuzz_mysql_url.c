/* libFuzzer target for the MySQL URL parser (my_parse_url in
 * dialects/mysql.c), called as lq_broker_open calls it, on "mysql://" and
 * the input. It never connects. Besides crashes and sanitizer reports it
 * aborts when
 *  - a URL that parses, rebuilt from its parts with every byte but the
 *    unreserved ones percent-encoded, parses to other parts;
 *  - the URL a refusal's message shows has a password, or the value of a
 *    parameter whose name decodes to a secret one, other than "***". */
#include "sql/dialect.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The layout of mysql.c's my_target, which the dialect keeps private. The
 * corpus replay fails at once if the two part ways: every valid seed goes
 * through the round trip below. */
typedef struct my_host {
    char *name;
    unsigned port;
} my_host;

typedef struct my_target {
    char *database, *user, *socket;
    my_host hosts[16];
    int host_count;
} my_target;

static void fail(const char *what, const char *url) {
    fprintf(stderr, "fuzz_mysql_url: %s: %s\n", what, url);
    abort();
}

static const char SCHEME[] = "mysql://";

/* Parses `url` into `t` as lq_broker_open does. */
static int parse(lq__broker_target *t, const char *url) {
    const char *rest;
    if (lq__dialect_for_url(url, &rest) != &lq__mysql_dialect) fail("not the mysql dialect", url);
    memset(t, 0, sizeof *t);
    t->url = strdup(url);
    if (!t->url) fail("out of memory", url);
    return lq__mysql_dialect.parse_url(t, url, rest);
}

static void target_free(lq__broker_target *t) {
    lq__mysql_dialect.free_target(t->own);
    free(t->url);
    free(t->password);
}

static void add_encoded(lq__strbuf *sb, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            lq__sb_addc(sb, (char)*p);
        else
            lq__sb_addf(sb, "%%%02X", *p);
    }
}

static int same_text(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static void round_trip(const lq__broker_target *t, const char *url) {
    const my_target *m = t->own;
    if (!m) fail("no target", url);
    if (m->host_count < 0 || m->host_count > 16) fail("a host count out of its range", url);
    for (int i = 0; i < m->host_count; i++)
        if (m->hosts[i].port > 65535) fail("a port past 65535", url);
    lq__strbuf sb = {0};
    lq__sb_add(&sb, SCHEME);
    if (m->user) add_encoded(&sb, m->user);
    if (t->password) {
        lq__sb_addc(&sb, ':');
        add_encoded(&sb, t->password);
    }
    if (m->user || t->password) lq__sb_addc(&sb, '@');
    for (int i = 0; i < m->host_count; i++) {
        if (i) lq__sb_addc(&sb, ',');
        if (m->hosts[i].name) add_encoded(&sb, m->hosts[i].name);
        if (m->hosts[i].port) lq__sb_addf(&sb, ":%u", m->hosts[i].port);
    }
    if (m->database) {
        lq__sb_addc(&sb, '/');
        add_encoded(&sb, m->database);
    }
    if (m->socket) {
        lq__sb_add(&sb, "?socket=");
        add_encoded(&sb, m->socket);
    }
    if (sb.failed) fail("out of memory", url);
    lq__broker_target again;
    if (parse(&again, sb.data) != LQ_OK) fail("the rebuilt URL is refused", sb.data);
    const my_target *n = again.own;
    int same_hosts = m->host_count == n->host_count;
    for (int i = 0; same_hosts && i < m->host_count; i++)
        same_hosts = same_text(m->hosts[i].name, n->hosts[i].name) && m->hosts[i].port == n->hosts[i].port;
    if (!same_text(m->user, n->user) || !same_text(t->password, again.password) || !same_hosts ||
        !same_text(m->database, n->database) || !same_text(m->socket, n->socket))
        fail("the rebuilt URL parses to other parts", url);
    target_free(&again);
    lq__sb_free(&sb);
}

/* Whether `key` (n bytes) percent-decodes to a secret parameter's name. */
static int secret_key(const char *key, size_t n) {
    char name[32];
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j + 1 == sizeof name) return 0;
        char c = key[i];
        if (c == '%' && i + 2 < n) {
            char hex[3] = {key[i + 1], key[i + 2], '\0'};
            char *end;
            c = (char)strtol(hex, &end, 16);
            if (*end) c = '%';
            else i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        name[j++] = c;
    }
    name[j] = '\0';
    return strcasecmp(name, "password") == 0 || strcasecmp(name, "sslpassword") == 0 ||
           strcasecmp(name, "tls_passphrase") == 0;
}

/* The parser's messages start with the URL as shown, in quotes. Where the
 * URL holds no quote, that is the text up to the next one; and a URL of up
 * to 300 bytes is shown whole (messages are cut at 511). */
static void check_message(const char *url) {
    const char *msg = lq_errmsg();
    if (strlen(url) > 300 || strchr(url, '"') || strncmp(msg, "\"mysql://", 9) != 0) return;
    const char *end = strchr(msg + 1, '"');
    char *shown = strndup(msg + 1, end ? (size_t)(end - msg - 1) : strlen(msg + 1));
    if (!shown) fail("out of memory", url);
    /* The password: from the first ':' to the last '@' before the query. */
    const char *rest = url + strlen(SCHEME);
    size_t head = strcspn(rest, "?");
    const char *at = NULL;
    for (const char *q = rest; q < rest + head; q++)
        if (*q == '@') at = q;
    const char *colon = at ? memchr(rest, ':', (size_t)(at - rest)) : NULL;
    size_t keep = colon ? (size_t)(colon + 1 - url) : 0;
    if (colon && (strncmp(shown, url, keep) != 0 || strncmp(shown + keep, "***@", 4) != 0))
        fail("a message shows the password", msg);
    /* The query's secret values. */
    const char *query = strchr(colon ? shown + keep : shown, '?');
    for (const char *q = query ? query + 1 : ""; *q;) {
        size_t n = strcspn(q, "&");
        const char *eq = memchr(q, '=', n);
        size_t value = eq ? n - (size_t)(eq + 1 - q) : 0;
        if (eq && secret_key(q, (size_t)(eq - q)) && value &&
            !(value == 3 && strncmp(eq + 1, "***", 3) == 0))
            fail("a message shows a secret parameter", msg);
        q += n;
        if (*q == '&') q++;
    }
    free(shown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (memchr(data, '\0', size)) return -1; /* a URL is a C string */
    char *url = malloc(sizeof SCHEME + size);
    if (!url) fail("out of memory", "");
    memcpy(url, SCHEME, sizeof SCHEME - 1);
    memcpy(url + sizeof SCHEME - 1, data, size);
    url[sizeof SCHEME - 1 + size] = '\0';
    lq__broker_target t;
    int rc = parse(&t, url);
    if (rc == LQ_OK) round_trip(&t, url);
    else if (rc == LQ_MISUSE) check_message(url);
    else if (rc != LQ_NOMEM) fail("an unexpected status", url);
    target_free(&t);
    free(url);
    return 0;
}
