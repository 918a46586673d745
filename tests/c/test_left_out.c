/* A build without a dialect refuses its URLs at open, naming the build
 * option, and shows none of the URL past its scheme. Built only when
 * LQ_WITH_POSTGRESQL or LQ_WITH_MYSQL is OFF. */
#include "check.h"

#include <libqueue.h>

#include <string.h>

static void refused(const char *url, const char *option) {
    lq_broker *b = NULL;
    CHECK(lq_broker_open(&b, url, NULL) == LQ_DIALECT && b == NULL);
    CHECK_CONTAINS(lq_errmsg(), option);
    CHECK(strstr(lq_errmsg(), "secret") == NULL);
}

int main(void) {
#ifndef LQ_WITH_POSTGRESQL
    refused("postgresql://user:secret@localhost/db", "LQ_WITH_POSTGRESQL=ON");
    refused("postgres://user:secret@localhost/db", "LQ_WITH_POSTGRESQL=ON");
#endif
#ifndef LQ_WITH_MYSQL
    refused("mysql://user:secret@localhost/db", "LQ_WITH_MYSQL=ON");
    refused("mariadb://user:secret@localhost/db", "LQ_WITH_MYSQL=ON");
#endif
    CHECK_DONE();
}
