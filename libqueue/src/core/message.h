/* A message to publish. */
#ifndef LQ_MESSAGE_H
#define LQ_MESSAGE_H

#include "base/headers.h"

struct lq_message {
    void *payload;
    size_t payload_size;
    int64_t id;
    bool has_id;
    char *group;
    char *partition_key;
    int64_t priority;
    bool has_priority;
    int64_t delay_ms;
    int64_t expires_in_ms; /* 0: never */
    lq__headers headers;
    char *dedup_key;
    int on_duplicate; /* lq_on_duplicate */
};

/* A deep copy. Ownership: *out is the caller's (lq_message_free). */
LQ__HIDDEN int lq__message_copy(lq_message **out, const lq_message *m);

#endif
