/* Reading the values a statement returns, as every dialect gives them: an
 * integer column comes back as an integer, or as its decimal text; a time
 * column as its text, or as an integer of epoch ms. */
#include "sql/dialect.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

char *lq__value_text(const lq__value *v) {
    if (v->type == LQ__V_NULL) return NULL;
    char *s = malloc(v->n + 1);
    if (!s) return NULL;
    if (v->n) memcpy(s, v->p, v->n);
    s[v->n] = '\0';
    return s;
}

int64_t lq__value_int(const lq__value *v) {
    if (v->type == LQ__V_INT) return v->i;
    if (v->type != LQ__V_TEXT || v->n == 0 || v->n >= LQ__INT_TEXT_SIZE) return 0;
    char text[LQ__INT_TEXT_SIZE];
    memcpy(text, v->p, v->n);
    text[v->n] = '\0';
    return strtoll(text, NULL, 10);
}

bool lq__value_time_ms(int64_t *ms, const lq__value *v) {
    if (v->type == LQ__V_INT) {
        *ms = v->i;
        return true;
    }
    char text[LQ__TIME_TEXT_SIZE + 8];
    if (v->type != LQ__V_TEXT || v->n >= sizeof text) return false;
    memcpy(text, v->p, v->n);
    text[v->n] = '\0';
    return lq__time_parse(ms, text);
}

int lq__on_count(void *ctx, const lq__value *cols, int count) {
    if (count > 0) *(int64_t *)ctx = lq__value_int(&cols[0]);
    return LQ_OK;
}
