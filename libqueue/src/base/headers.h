/* Headers: a map of string to string, kept in a JSON object column. */
#ifndef LQ_HEADERS_H
#define LQ_HEADERS_H

#include "base/strbuf.h"

typedef struct lq__headers {
    size_t count, cap;
    char **names;
    char **values;
} lq__headers;

/* Adds a header or replaces the value of one with the same name. */
LQ__HIDDEN int lq__headers_set(lq__headers *h, const char *name, const char *value);
LQ__HIDDEN const char *lq__headers_get(const lq__headers *h, const char *name);
LQ__HIDDEN void lq__headers_clear(lq__headers *h);
/* Writes the headers as one JSON object. */
LQ__HIDDEN void lq__headers_to_json(lq__strbuf *out, const lq__headers *h);
/* Reads a JSON object of strings (numbers, booleans and null are kept as
 * their text). Fails with LQ_BACKEND when the text is not such an object. */
LQ__HIDDEN int lq__headers_from_json(lq__headers *h, const char *json, size_t len);

#endif
