/* Headers: JSON round trips, escapes, and refusal of what is not an object. */
#include "check.h"
#include "base/headers.h"

#include <stdlib.h>

int main(void) {
    lq__headers h = {0};
    CHECK(lq__headers_set(&h, "trace", "abc") == LQ_OK);
    CHECK(lq__headers_set(&h, "quote\"d", "line\nbreak\\") == LQ_OK);
    CHECK(lq__headers_set(&h, "trace", "def") == LQ_OK);
    CHECK(h.count == 2);
    lq__strbuf sb = {0};
    lq__headers_to_json(&sb, &h);
    CHECK_STR(sb.data, "{\"trace\":\"def\",\"quote\\\"d\":\"line\\nbreak\\\\\"}");

    lq__headers back = {0};
    CHECK(lq__headers_from_json(&back, sb.data, sb.len) == LQ_OK);
    CHECK(back.count == 2);
    CHECK_STR(lq__headers_get(&back, "quote\"d"), "line\nbreak\\");
    CHECK_STR(lq__headers_get(&back, "trace"), "def");
    lq__headers_clear(&back);
    lq__sb_free(&sb);
    lq__headers_clear(&h);

    const char *json = " { \"n\" : 12 , \"ok\": true, \"u\": \"\\u00e9\\ud83d\\ude00\" } ";
    CHECK(lq__headers_from_json(&back, json, strlen(json)) == LQ_OK);
    CHECK_STR(lq__headers_get(&back, "n"), "12");
    CHECK_STR(lq__headers_get(&back, "ok"), "true");
    CHECK_STR(lq__headers_get(&back, "u"), "\xc3\xa9\xf0\x9f\x98\x80");
    lq__headers_clear(&back);

    CHECK(lq__headers_from_json(&back, "{}", 2) == LQ_OK && back.count == 0);
    CHECK(lq__headers_from_json(&back, "[1]", 3) == LQ_BACKEND);
    CHECK(lq__headers_from_json(&back, "{\"a\":", 5) == LQ_BACKEND);
    CHECK(back.count == 0);
    CHECK_DONE();
}
