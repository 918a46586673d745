/* JSON text written into a string buffer: strings (escaped), and bytes that
 * are not UTF-8 as base64. */
#ifndef LQ_JSON_OUT_H
#define LQ_JSON_OUT_H

#include "base/strbuf.h"

/* `n` bytes of UTF-8 as a JSON string, quotes included. */
LQ__HIDDEN void lq__json_string(lq__strbuf *sb, const char *s, size_t n);
/* Whether `n` bytes are well-formed UTF-8. */
LQ__HIDDEN bool lq__utf8_valid(const void *data, size_t n);
/* `n` bytes in base64 (RFC 4648, padded) as a JSON string. */
LQ__HIDDEN void lq__json_base64(lq__strbuf *sb, const void *data, size_t n);

#endif
