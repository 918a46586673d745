/* Time zones from the system's tzdata: offsets and changes checked by hand
 * (2027 in Europe/Berlin, America/New_York, Australia/Lord_Howe; 2050 from
 * the footer rules), wall times in gaps and overlaps, the POSIX rules alone,
 * names that are no zone, damaged files, and the C library's reading of the
 * same files over many instants. */
#include "check.h"
#include "base/clock.h"
#include "base/tzfile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Seconds since the epoch of "YYYY-MM-DD HH:MM:SS", read as UTC (or as a
 * wall clock, for lq__tz_local_to_utc). */
static int64_t at(const char *text) {
    int64_t ms = 0;
    if (!lq__time_parse(&ms, text)) fprintf(stderr, "bad time %s\n", text);
    return ms / 1000;
}

static lq__tz *load(const char *name) {
    lq__tz *zone = NULL;
    if (lq__tz_load(&zone, name) != LQ_OK) fprintf(stderr, "%s: %s\n", name, lq_errmsg());
    return zone;
}

/* The change at `when` (UTC) from offset `before` to `after`, and that it is
 * the first after a day earlier. */
static void check_change(const lq__tz *z, const char *when, int32_t before, int32_t after) {
    int64_t t = at(when), next = 0;
    CHECK(lq__tz_offset(z, t - 1) == before);
    CHECK(lq__tz_offset(z, t) == after);
    CHECK(lq__tz_next_change(z, t - 86400, &next) && next == t);
}

static void test_berlin(void) {
    lq__tz *z = load("Europe/Berlin");
    if (!z) return;
    CHECK_STR(lq__tz_name(z), "Europe/Berlin");
    check_change(z, "2027-03-28 01:00:00", 3600, 7200);
    check_change(z, "2027-10-31 01:00:00", 7200, 3600);
    check_change(z, "2050-03-27 01:00:00", 3600, 7200); /* past the table: the footer */
    check_change(z, "2050-10-30 01:00:00", 7200, 3600);
    int64_t next = 0;
    CHECK(lq__tz_next_change(z, at("2027-03-28 01:00:00"), &next) &&
          next == at("2027-10-31 01:00:00"));

    int64_t got[2];
    CHECK(lq__tz_local_to_utc(z, at("2027-06-01 12:00:00"), got) == 1 &&
          got[0] == at("2027-06-01 10:00:00"));
    /* 02:30 never comes on 2027-03-28; the gap ends at 03:00 CEST. */
    CHECK(lq__tz_local_to_utc(z, at("2027-03-28 02:30:00"), got) == 0 &&
          got[0] == at("2027-03-28 01:00:00"));
    CHECK(lq__tz_local_to_utc(z, at("2027-03-28 02:00:00"), got) == 0 &&
          got[0] == at("2027-03-28 01:00:00"));
    CHECK(lq__tz_local_to_utc(z, at("2027-03-28 03:00:00"), got) == 1 &&
          got[0] == at("2027-03-28 01:00:00"));
    CHECK(lq__tz_local_to_utc(z, at("2027-03-28 01:59:59"), got) == 1 &&
          got[0] == at("2027-03-28 00:59:59"));
    /* 02:30 comes twice on 2027-10-31: CEST, then CET. */
    CHECK(lq__tz_local_to_utc(z, at("2027-10-31 02:30:00"), got) == 2 &&
          got[0] == at("2027-10-31 00:30:00") && got[1] == at("2027-10-31 01:30:00"));
    CHECK(lq__tz_local_to_utc(z, at("2027-10-31 03:00:00"), got) == 1 &&
          got[0] == at("2027-10-31 02:00:00"));
    CHECK(lq__tz_local_to_utc(z, at("2027-10-31 01:59:59"), got) == 1 &&
          got[0] == at("2027-10-30 23:59:59"));
    CHECK(lq__tz_local_to_utc(z, at("2050-10-30 02:00:00"), got) == 2 &&
          got[1] == at("2050-10-30 01:00:00"));
    /* Before the first change: local mean time, +0:53:28. */
    CHECK(lq__tz_offset(z, at("1850-01-01 00:00:00")) == 3208);
    lq__tz_free(z);
}

static void test_other_zones(void) {
    lq__tz *z = load("America/New_York");
    if (z) {
        check_change(z, "2027-03-14 07:00:00", -18000, -14400);
        check_change(z, "2027-11-07 06:00:00", -14400, -18000);
        int64_t got[2];
        CHECK(lq__tz_local_to_utc(z, at("2027-03-14 02:30:00"), got) == 0 &&
              got[0] == at("2027-03-14 07:00:00"));
        CHECK(lq__tz_local_to_utc(z, at("2027-11-07 01:30:00"), got) == 2 &&
              got[0] == at("2027-11-07 05:30:00") && got[1] == at("2027-11-07 06:30:00"));
        lq__tz_free(z);
    }
    /* Lord Howe Island turns its clocks by half an hour. */
    if ((z = load("Australia/Lord_Howe"))) {
        check_change(z, "2027-04-03 15:00:00", 39600, 37800);
        check_change(z, "2027-10-02 15:30:00", 37800, 39600);
        check_change(z, "2050-10-01 15:30:00", 37800, 39600);
        int64_t got[2];
        CHECK(lq__tz_local_to_utc(z, at("2027-10-03 02:15:00"), got) == 0 &&
              got[0] == at("2027-10-02 15:30:00"));
        CHECK(lq__tz_local_to_utc(z, at("2027-04-04 01:45:00"), got) == 2 &&
              got[0] == at("2027-04-03 14:45:00") && got[1] == at("2027-04-03 15:15:00"));
        lq__tz_free(z);
    }
    if ((z = load("Asia/Tokyo"))) {
        int64_t next = 0, got[2];
        CHECK(lq__tz_offset(z, at("2027-03-28 01:00:00")) == 32400);
        CHECK(!lq__tz_next_change(z, at("2000-01-01 00:00:00"), &next));
        CHECK(lq__tz_local_to_utc(z, at("2027-03-28 02:30:00"), got) == 1 &&
              got[0] == at("2027-03-27 17:30:00"));
        lq__tz_free(z);
    }
    const char *utc_names[] = {"UTC", "Etc/UTC"};
    for (int i = 0; i < 2; i++) {
        if (!(z = load(utc_names[i]))) continue;
        int64_t next = 0, got[2];
        CHECK(lq__tz_offset(z, at("2027-03-28 01:00:00")) == 0);
        CHECK(!lq__tz_next_change(z, 0, &next));
        CHECK(lq__tz_local_to_utc(z, 12345, got) == 1 && got[0] == 12345);
        lq__tz_free(z);
    }
}

/* POSIX rules without a file. */
static void test_posix_rules(void) {
    lq__tz *z = NULL;
    CHECK(lq__tz_from_posix(&z, "CET-1CEST,M3.5.0,M10.5.0/3") == LQ_OK);
    if (z) {
        check_change(z, "2027-03-28 01:00:00", 3600, 7200);
        check_change(z, "2027-10-31 01:00:00", 7200, 3600);
        check_change(z, "2099-03-29 01:00:00", 3600, 7200);
        lq__tz_free(z);
    }
    CHECK(lq__tz_from_posix(&z, "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0") == LQ_OK);
    if (z) {
        check_change(z, "2027-10-02 15:30:00", 37800, 39600);
        check_change(z, "2027-04-03 15:00:00", 39600, 37800);
        lq__tz_free(z);
    }
    /* Santiago's changes at 24:00 on a Saturday. */
    CHECK(lq__tz_from_posix(&z, "<-04>4<-03>,M9.1.6/24,M4.1.6/24") == LQ_OK);
    if (z) {
        check_change(z, "2027-09-05 04:00:00", -14400, -10800);
        check_change(z, "2027-04-04 03:00:00", -10800, -14400);
        lq__tz_free(z);
    }
    /* DST all year (RFC 8536's example): no change at all. */
    CHECK(lq__tz_from_posix(&z, "EST5EDT,0/0,J365/25") == LQ_OK);
    if (z) {
        int64_t next = 0;
        CHECK(lq__tz_offset(z, at("2027-01-01 05:00:00")) == -14400);
        CHECK(lq__tz_offset(z, at("2027-07-01 00:00:00")) == -14400);
        CHECK(!lq__tz_next_change(z, at("2027-01-01 00:00:00"), &next));
        lq__tz_free(z);
    }
    /* Julian days skip February 29th; plain days count it. */
    CHECK(lq__tz_from_posix(&z, "AAA0BBB,J60/0,300/0") == LQ_OK);
    if (z) {
        check_change(z, "2028-03-01 00:00:00", 0, 3600);
        lq__tz_free(z);
    }
    CHECK(lq__tz_from_posix(&z, "AAA0BBB,60/0,300/0") == LQ_OK);
    if (z) {
        check_change(z, "2028-03-01 00:00:00", 0, 3600); /* day 60 of 2028, counted from 0 */
        check_change(z, "2027-03-02 00:00:00", 0, 3600);
        lq__tz_free(z);
    }
    /* DST without dates: the US ones. */
    CHECK(lq__tz_from_posix(&z, "EST5EDT") == LQ_OK);
    if (z) {
        check_change(z, "2027-03-14 07:00:00", -18000, -14400);
        lq__tz_free(z);
    }
    CHECK(lq__tz_from_posix(&z, "JST-9") == LQ_OK);
    if (z) {
        CHECK(lq__tz_offset(z, 0) == 32400);
        lq__tz_free(z);
    }
}

static void test_bad_posix_rules(void) {
    lq__tz *z;
    const char *bad[] = {
        "", "X", "CET", "CE-1", "CET-25", "<+1>-1", ":Europe/Berlin", "CET-1CEST,M3.5.0",
        "CET-1CEST,M13.5.0,M10.5.0", "CET-1CEST,M3.6.0,M10.5.0", "CET-1CEST,M3.5.7,M10.5.0",
        "CET-1CEST,M3.5.0,M10.5.0/168", "CET-1CEST,J0,J100", "CET-1CEST,366,J100",
        "CET-1CEST,M3.5.0,M10.5.0,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        z = (lq__tz *)1;
        int rc = lq__tz_from_posix(&z, bad[i]);
        CHECK(rc == LQ_MISUSE && z == NULL);
        if (rc != LQ_MISUSE) fprintf(stderr, "  taken: \"%s\"\n", bad[i]);
    }
}

static void test_names(void) {
    struct {
        const char *name, *says;
    } bad[] = {
        {"../x", "\"../x\""},
        {"/etc/passwd", "not by a path"},
        {"Europe/../../etc/passwd", "not by a path"},
        {"Europe/./Berlin", "not by a path"},
        {"Europe//Berlin", "not by a path"},
        {"", "unknown time zone"},
        {"Mars/Olympus", "unknown time zone \"Mars/Olympus\""},
        {"Europe", "unknown time zone"},
        {"Europe/Berlin/", "not by a path"},
        {"zone.tab", "not a TZif file"},
        {".hidden", "not by a path"},
        {"Europe/Berlin x", "not by a path"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lq__tz *z = (lq__tz *)1;
        CHECK(lq__tz_load(&z, bad[i].name) == LQ_MISUSE && z == NULL);
        CHECK_CONTAINS(lq_errmsg(), bad[i].says);
    }
    struct stat st;
    if (stat(LQ__TZ_DIR "/right/Europe/Berlin", &st) == 0) {
        lq__tz *z = NULL;
        CHECK(lq__tz_load(&z, "right/Europe/Berlin") == LQ_MISUSE);
        CHECK_CONTAINS(lq_errmsg(), "leap seconds");
    }
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *data = malloc(1 << 16);
    *len = data ? fread(data, 1, 1 << 16, f) : 0;
    fclose(f);
    return data;
}

static void spill(const char *dir, const char *name, const unsigned char *data, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

/* Damaged copies of a real file, in a directory of the test's own. */
static void test_damaged_files(void) {
    size_t len = 0;
    unsigned char *berlin = slurp(LQ__TZ_DIR "/Europe/Berlin", &len);
    char dir[] = "/tmp/lq_tzfile_XXXXXX";
    if (!berlin || !mkdtemp(dir)) {
        CHECK(!"no Europe/Berlin to copy");
        free(berlin);
        return;
    }
    spill(dir, "Whole", berlin, len);
    spill(dir, "Short", berlin, len / 2);
    spill(dir, "NoFooter", berlin, len - 1);
    spill(dir, "Empty", berlin, 0);
    unsigned char v1[64];
    memcpy(v1, berlin, sizeof v1);
    v1[4] = 0;
    spill(dir, "Version1", v1, sizeof v1);
    unsigned char *bad_footer = malloc(len);
    memcpy(bad_footer, berlin, len);
    bad_footer[len - 3] = '!'; /* "M10.5.0/3" becomes "M10.5.!/3" */
    spill(dir, "BadFooter", bad_footer, len);
    struct {
        const char *name, *says;
    } cases[] = {{"Short", "cut short"},
                 {"NoFooter", "footer"},
                 {"Empty", "not a TZif file"},
                 {"Version1", "version 1"},
                 {"BadFooter", "not a POSIX TZ rule"}};
    lq__tz *z = NULL;
    CHECK(lq__tz_load_from(&z, dir, "Whole") == LQ_OK && z &&
          lq__tz_offset(z, at("2027-07-01 00:00:00")) == 7200);
    lq__tz_free(z);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(lq__tz_load_from(&z, dir, cases[i].name) == LQ_MISUSE && z == NULL);
        CHECK_CONTAINS(lq_errmsg(), cases[i].says);
        CHECK_CONTAINS(lq_errmsg(), cases[i].name);
    }
    const char *names[] = {"Whole", "Short", "NoFooter", "Empty", "Version1", "BadFooter"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    free(bad_footer);
    free(berlin);
}

static void test_calendar(void) {
    CHECK(lq__tz_days_from_civil(1970, 1, 1) == 0);
    CHECK(lq__tz_days_from_civil(2000, 3, 1) == 11017);
    CHECK(lq__tz_days_from_civil(1969, 12, 31) == -1);
    CHECK(lq__tz_weekday(0) == 4 && lq__tz_weekday(-1) == 3);
    CHECK(lq__tz_weekday(lq__tz_days_from_civil(2027, 3, 28)) == 0);
    CHECK(lq__tz_month_days(2028, 2) == 29 && lq__tz_month_days(2100, 2) == 28 &&
          lq__tz_month_days(2000, 2) == 29 && lq__tz_month_days(2027, 4) == 30);
    int agree = 1;
    for (int64_t d = -800000; d < 3000000; d += 37) {
        int64_t y;
        unsigned m, day;
        lq__tz_civil_from_days(d, &y, &m, &day);
        agree = agree && lq__tz_days_from_civil(y, m, day) == d && day <= lq__tz_month_days(y, m);
    }
    CHECK(agree);
}

/* The C library reads the same files (this process alone sets TZ, before
 * any thread): every offset, at instants spread over 1900 to 2200, and each
 * instant among the wall time's instants. */
static void test_against_libc(void) {
    const char *zones[] = {"Europe/Berlin",    "America/New_York",  "Australia/Lord_Howe",
                           "Asia/Tokyo",       "America/Santiago",  "Asia/Kolkata",
                           "Pacific/Apia",     "Africa/Casablanca", "Europe/Dublin",
                           "Antarctica/Troll", "America/Nuuk",      "UTC"};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof zones / sizeof zones[0]; i++) {
        lq__tz *z = load(zones[i]);
        if (!z) continue;
        char tz[64];
        snprintf(tz, sizeof tz, ":%s", zones[i]);
        setenv("TZ", tz, 1);
        tzset();
        int offsets = 0, walls = 0, n = 20000;
        for (int k = 0; k < n; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            time_t t = (time_t)(int64_t)(x % 9467280000ull) - 2208988800;
            struct tm tm;
            localtime_r(&t, &tm);
            int32_t offset = lq__tz_offset(z, t);
            offsets += offset == tm.tm_gmtoff;
            int64_t got[2];
            int count = lq__tz_local_to_utc(z, t + offset, got);
            walls += (count >= 1 && got[0] == t) || (count == 2 && got[1] == t);
        }
        if (offsets != n || walls != n)
            fprintf(stderr, "%s: %d/%d offsets, %d/%d walls\n", zones[i], offsets, n, walls, n);
        CHECK(offsets == n && walls == n);
        lq__tz_free(z);
    }
    unsetenv("TZ");
}

int main(void) {
    test_berlin();
    test_other_zones();
    test_posix_rules();
    test_bad_posix_rules();
    test_names();
    test_damaged_files();
    test_calendar();
    test_against_libc();
    CHECK_DONE();
}
