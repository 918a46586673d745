/* Headers: a map of string to string, kept in a JSON object column. */
#ifndef LQ_HEADERS_H
#define LQ_HEADERS_H

#include "strbuf.h"

typedef struct lq_headers {
    size_t count, cap;
    char **names;
    char **values;
} lq_headers;

/* Adds a header or replaces the value of one with the same name. */
LQ_HIDDEN int lq__headers_set(lq_headers *h, const char *name, const char *value);
LQ_HIDDEN const char *lq__headers_get(const lq_headers *h, const char *name);
LQ_HIDDEN void lq__headers_clear(lq_headers *h);
/* Writes the headers as one JSON object. */
LQ_HIDDEN void lq__headers_to_json(lq_strbuf *out, const lq_headers *h);
/* Reads a JSON object of strings (numbers, booleans and null are kept as
 * their text). Fails with LQ_BACKEND when the text is not such an object. */
LQ_HIDDEN int lq__headers_from_json(lq_headers *h, const char *json, size_t len);

#endif
