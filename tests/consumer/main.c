/* A program outside the project, built against an installed libqueue (by
 * tests/consumer/run.sh, through find_package and through pkg-config): opens
 * a SQLite file, prints the library's version, closes.
 *
 *   consumer <database file>
 */
#include <libqueue.h>

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <database file>\n", argv[0]);
        return 2;
    }
    /* The header and the library linked are of one version. */
    if (lq_version_number() != LQ_VERSION_NUMBER) {
        fprintf(stderr, "libqueue.h is version %d, the library linked %d\n", LQ_VERSION_NUMBER,
                lq_version_number());
        return 1;
    }
    char url[4096];
    if (snprintf(url, sizeof url, "sqlite:%s", argv[1]) >= (int)sizeof url) {
        fprintf(stderr, "path too long: %s\n", argv[1]);
        return 2;
    }
    lq_broker *broker = NULL;
    if (lq_broker_open(&broker, url, NULL) != LQ_OK) {
        fprintf(stderr, "lq_broker_open(%s): %s\n", url, lq_errmsg());
        return 1;
    }
    printf("%s\n", lq_version_string());
    lq_broker_close(broker);
    return 0;
}
