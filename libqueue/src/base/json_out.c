/* JSON text out, for what the library reports as JSON (headers, dead
 * letters). */
#include "base/json_out.h"

void lq__json_string(lq__strbuf *sb, const char *s, size_t n) {
    lq__sb_addc(sb, '"');
    for (const unsigned char *p = (const unsigned char *)s, *end = p + n; p < end; p++) {
        switch (*p) {
        case '"': lq__sb_add(sb, "\\\""); break;
        case '\\': lq__sb_add(sb, "\\\\"); break;
        case '\n': lq__sb_add(sb, "\\n"); break;
        case '\r': lq__sb_add(sb, "\\r"); break;
        case '\t': lq__sb_add(sb, "\\t"); break;
        default:
            if (*p < 0x20) lq__sb_addf(sb, "\\u%04x", *p);
            else lq__sb_addc(sb, (char)*p);
        }
    }
    lq__sb_addc(sb, '"');
}

bool lq__utf8_valid(const void *data, size_t n) {
    const unsigned char *p = data, *end = p + n;
    while (p < end) {
        unsigned c = *p++;
        int more = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (more < 0 || (c & 0xFE) == 0xC0 || c > 0xF4 || end - p < more) return false;
        unsigned cp = more ? c & (0x3F >> more) : c;
        for (int i = 0; i < more; i++, p++) {
            if ((*p & 0xC0) != 0x80) return false;
            cp = cp << 6 | (*p & 0x3F);
        }
        /* Overlong forms, surrogates and past U+10FFFF are not UTF-8. */
        if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) || (cp >= 0xD800 && cp <= 0xDFFF) ||
            cp > 0x10FFFF)
            return false;
    }
    return true;
}

void lq__json_base64(lq__strbuf *sb, const void *data, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    lq__sb_addc(sb, '"');
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char out[4] = {digits[v >> 18 & 63], digits[v >> 12 & 63], i + 1 < n ? digits[v >> 6 & 63] : '=',
                       i + 2 < n ? digits[v & 63] : '='};
        lq__sb_addn(sb, out, 4);
    }
    lq__sb_addc(sb, '"');
}
