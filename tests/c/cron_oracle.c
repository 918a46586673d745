/* The C side of tests/python/test_cron_oracle.py: reads lines
 * "expression<TAB>zone<TAB>unix seconds" and writes for each the next tick
 * after that instant in unix seconds, or "error <message>". */
#include "base/cron.h"
#include "base/tzfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void answer(const char *expr, const char *zone_name, int64_t after, lq__tz **zone) {
    if (!*zone || strcmp(lq__tz_name(*zone), zone_name) != 0) {
        lq__tz_free(*zone); /* lines come grouped by zone: keep the last one */
        if (lq__tz_load(zone, zone_name) != LQ_OK) {
            printf("error %s\n", lq_errmsg());
            return;
        }
    }
    lq__cron cron;
    int64_t tick;
    if (lq__cron_parse(&cron, expr) != LQ_OK ||
        lq__cron_next(&tick, &cron, *zone, after * 1000) != LQ_OK)
        printf("error %s\n", lq_errmsg());
    else printf("%" PRId64 "\n", tick / 1000);
}

int main(void) {
    char line[4096];
    lq__tz *zone = NULL;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *zone_name = strchr(line, '\t'),
             *instant = zone_name ? strchr(zone_name + 1, '\t') : NULL;
        if (!instant) {
            printf("error the line is not expression, zone and instant\n");
            continue;
        }
        *zone_name++ = '\0';
        *instant++ = '\0';
        answer(line, zone_name, strtoll(instant, NULL, 10), &zone);
    }
    lq__tz_free(zone);
    return 0;
}
