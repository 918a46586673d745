/* Advisory lock key templates: "accounts-{account}" is the literal
 * "accounts-" followed by the value of column account. */
#ifndef LQ_TEMPLATE_H
#define LQ_TEMPLATE_H

#include "base/internal.h"

typedef struct lq__key_part {
    bool is_column;
    char *text; /* the literal, or the column's name */
} lq__key_part;

typedef struct lq__key_template {
    size_t count;
    lq__key_part *parts;
} lq__key_template;

/* Parses a template; "{{" and "}}" stand for literal braces. A brace left
 * open, a stray "}", or an empty "{}" fails with LQ_MISUSE. */
LQ__HIDDEN int lq__template_parse(lq__key_template *out, const char *text);
LQ__HIDDEN void lq__template_free(lq__key_template *t);
/* Renders a key from column values looked up by name (NULL renders as ""). */
typedef const char *(*lq__column_lookup)(void *ctx, const char *column);
LQ__HIDDEN char *lq__template_render(const lq__key_template *t, lq__column_lookup lookup, void *ctx);

#endif
