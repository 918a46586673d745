/* Advisory lock key templates: "accounts-{account}" is the literal
 * "accounts-" followed by the value of column account. */
#ifndef LQ_TEMPLATE_H
#define LQ_TEMPLATE_H

#include "internal.h"

typedef struct lq_key_part {
    bool is_column;
    char *text; /* the literal, or the column's name */
} lq_key_part;

typedef struct lq_key_template {
    size_t count;
    lq_key_part *parts;
} lq_key_template;

/* Parses a template; "{{" and "}}" stand for literal braces. A brace left
 * open, a stray "}", or an empty "{}" fails with LQ_MISUSE. */
LQ_HIDDEN int lq__template_parse(lq_key_template *out, const char *text);
LQ_HIDDEN void lq__template_free(lq_key_template *t);
/* Renders a key from column values looked up by name (NULL renders as ""). */
typedef const char *(*lq_column_lookup)(void *ctx, const char *column);
LQ_HIDDEN char *lq__template_render(const lq_key_template *t, lq_column_lookup lookup, void *ctx);

#endif
