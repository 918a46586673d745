/* Dedup keys at publish (lq_message_set_dedup_key): which messages a row
 * already holds the key of, and which are written. */
#ifndef LQ_DEDUP_H
#define LQ_DEDUP_H

#include "core/broker.h"
#include "core/message.h"

typedef struct lq__dedup {
    lq_message **fresh; /* the messages to write, in call order */
    size_t *at;         /* where fresh[j] is among the call's messages */
    size_t *same_as;    /* per message: the earlier one of its key in the call, or SIZE_MAX */
    size_t fresh_count;
} lq__dedup;

/* Whether any message carries a key; and any takes the holder's id. */
LQ__HIDDEN bool lq__dedup_any(lq_message *const *messages, size_t count, bool *existing);
/* Looks each key up on conn (in the publish's transaction): a key a row
 * holds fails with LQ_DUPLICATE, naming the key and the row, or, where the
 * message says LQ_ON_DUPLICATE_EXISTING, puts the row's id in ids_out and
 * leaves the message out. A key given twice in one call is written once
 * (the second is refused, or takes the first's id). */
LQ__HIDDEN int lq__dedup_resolve(lq__dedup *dd, int64_t *ids_out, lq_broker *b, lq__conn *conn,
                                 const lq_table *t, lq_message *const *messages, size_t count);
/* After the fresh messages were written with fresh_ids: every id in place. */
LQ__HIDDEN void lq__dedup_spread(const lq__dedup *dd, int64_t *ids_out, const int64_t *fresh_ids,
                                 size_t count);
LQ__HIDDEN void lq__dedup_free(lq__dedup *dd);

#endif
