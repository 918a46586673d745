/* The advisory key template: parsing and rendering. */
#include "check.h"
#include "sql/template.h"

#include <stdlib.h>

static const char *lookup(void *ctx, const char *column) {
    (void)ctx;
    if (strcmp(column, "account") == 0) return "42";
    if (strcmp(column, "region") == 0) return "eu";
    return NULL;
}

static char *render(const char *text) {
    lq__key_template t;
    if (lq__template_parse(&t, text) != LQ_OK) return NULL;
    char *s = lq__template_render(&t, lookup, NULL);
    lq__template_free(&t);
    return s;
}

int main(void) {
    lq__key_template t;
    CHECK(lq__template_parse(&t, "accounts-{account}") == LQ_OK);
    CHECK(t.count == 2);
    CHECK(!t.parts[0].is_column);
    CHECK_STR(t.parts[0].text, "accounts-");
    CHECK(t.parts[1].is_column);
    CHECK_STR(t.parts[1].text, "account");
    lq__template_free(&t);

    char *s;
    CHECK_STR(s = render("accounts-{account}"), "accounts-42");
    free(s);
    CHECK_STR(s = render("{region}:{account}"), "eu:42");
    free(s);
    CHECK_STR(s = render("{{literal}}-{account}"), "{literal}-42");
    free(s);
    CHECK_STR(s = render("{missing}x"), "x");
    free(s);
    CHECK_STR(s = render(""), "");
    free(s);

    CHECK(lq__template_parse(&t, "open-{account") == LQ_MISUSE);
    CHECK_CONTAINS(lq_errmsg(), "never closed");
    CHECK(lq__template_parse(&t, "empty-{}") == LQ_MISUSE);
    CHECK(lq__template_parse(&t, "stray-}") == LQ_MISUSE);
    CHECK_DONE();
}
