#include "sql/template.h"

#include "base/strbuf.h"

#include <stdlib.h>
#include <string.h>

static int add_part(lq__key_template *t, bool is_column, lq__strbuf *text) {
    if (text->len == 0 && !is_column) return LQ_OK;
    lq__key_part *parts = realloc(t->parts, (t->count + 1) * sizeof *parts);
    if (!parts) return lq__error(LQ_NOMEM, "out of memory");
    t->parts = parts;
    char *s = lq__sb_take(text);
    if (!s) return lq__error(LQ_NOMEM, "out of memory");
    parts[t->count].is_column = is_column;
    parts[t->count].text = s;
    t->count++;
    return LQ_OK;
}

int lq__template_parse(lq__key_template *out, const char *text) {
    lq__key_template t = {0};
    lq__strbuf cur = {0};
    int rc = LQ_OK;
    for (const char *p = text; *p && rc == LQ_OK; p++) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            lq__sb_addc(&cur, *p++);
        } else if (*p == '{') {
            const char *close = strchr(p + 1, '}');
            if (!close) {
                rc = lq__error(LQ_MISUSE, "key template \"%s\": a \"{\" is never closed", text);
            } else if (close == p + 1) {
                rc = lq__error(LQ_MISUSE, "key template \"%s\": \"{}\" names no column", text);
            } else {
                rc = add_part(&t, false, &cur);
                if (rc == LQ_OK) {
                    lq__sb_addn(&cur, p + 1, (size_t)(close - p - 1));
                    rc = add_part(&t, true, &cur);
                }
                p = close;
            }
        } else if (*p == '}') {
            rc = lq__error(LQ_MISUSE, "key template \"%s\": a \"}\" closes nothing", text);
        } else {
            lq__sb_addc(&cur, *p);
        }
    }
    if (rc == LQ_OK) rc = add_part(&t, false, &cur);
    lq__sb_free(&cur);
    if (rc != LQ_OK) {
        lq__template_free(&t);
        return rc;
    }
    *out = t;
    return LQ_OK;
}

void lq__template_free(lq__key_template *t) {
    for (size_t i = 0; i < t->count; i++) free(t->parts[i].text);
    free(t->parts);
    t->parts = NULL;
    t->count = 0;
}

char *lq__template_render(const lq__key_template *t, lq__column_lookup lookup, void *ctx) {
    lq__strbuf sb = {0};
    for (size_t i = 0; i < t->count; i++) {
        const char *s = t->parts[i].is_column ? lookup(ctx, t->parts[i].text) : t->parts[i].text;
        if (s) lq__sb_add(&sb, s);
    }
    return lq__sb_take(&sb);
}
