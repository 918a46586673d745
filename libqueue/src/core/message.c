/* Messages: what a publish writes, built with setters and reusable. */
#include "base/clock.h"
#include "core/message.h"

#include <stdlib.h>
#include <string.h>

int lq_message_new(lq_message **out) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL; /* a failure leaves no dangling handle behind */
    *out = calloc(1, sizeof **out);
    return *out ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

void lq_message_reset(lq_message *m) {
    if (!m) return;
    free(m->payload);
    free(m->group);
    free(m->partition_key);
    free(m->dedup_key);
    lq__headers_clear(&m->headers);
    memset(m, 0, sizeof *m);
}

void lq_message_free(lq_message *m) {
    lq_message_reset(m);
    free(m);
}

static int replace(char **slot, const char *value) {
    char *copy = NULL;
    if (value && !(copy = lq__strdup(value))) return lq__error(LQ_NOMEM, "out of memory");
    free(*slot);
    *slot = copy;
    return LQ_OK;
}

int lq_message_set_payload(lq_message *m, const void *data, size_t size) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    LQ__CHECK_ARG(data || size == 0, "data is NULL");
    void *copy = lq__memdup(data, size);
    if (!copy) return lq__error(LQ_NOMEM, "out of memory");
    free(m->payload);
    m->payload = copy;
    m->payload_size = size;
    return LQ_OK;
}

int lq_message_set_id(lq_message *m, int64_t id) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    m->id = id;
    m->has_id = true;
    return LQ_OK;
}

int lq_message_set_group(lq_message *m, const char *group) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    return replace(&m->group, group);
}

int lq_message_set_partition_key(lq_message *m, const char *key) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    return replace(&m->partition_key, key);
}

int lq_message_set_dedup_key(lq_message *m, const char *key) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    LQ__CHECK_ARG(!key || *key, "an empty dedup key: pass NULL for none");
    return replace(&m->dedup_key, key);
}

int lq_message_set_on_duplicate(lq_message *m, int on_duplicate) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    LQ__CHECK_ARG(on_duplicate == LQ_ON_DUPLICATE_REFUSE || on_duplicate == LQ_ON_DUPLICATE_EXISTING,
                  "on_duplicate is LQ_ON_DUPLICATE_REFUSE or LQ_ON_DUPLICATE_EXISTING");
    m->on_duplicate = on_duplicate;
    return LQ_OK;
}

int lq_message_set_priority(lq_message *m, int64_t priority) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    m->priority = priority;
    m->has_priority = true;
    return LQ_OK;
}

int lq_message_set_delay_ms(lq_message *m, int64_t delay_ms) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    int rc = lq__check_delay(delay_ms, "delay_ms");
    if (rc != LQ_OK) return rc;
    m->delay_ms = delay_ms;
    return LQ_OK;
}

int lq_message_set_expires_in_ms(lq_message *m, int64_t expires_in_ms) {
    lq__error_clear();
    LQ__CHECK_ARG(m, "message is NULL");
    int rc = lq__check_delay(expires_in_ms, "expires_in_ms");
    if (rc != LQ_OK) return rc;
    m->expires_in_ms = expires_in_ms;
    return LQ_OK;
}

int lq_message_set_header(lq_message *m, const char *name, const char *value) {
    lq__error_clear();
    LQ__CHECK_ARG(m && name && value, "an argument is NULL");
    LQ__CHECK_ARG(*name, "a header needs a name");
    return lq__headers_set(&m->headers, name, value);
}

int lq__message_copy(lq_message **out, const lq_message *m) {
    int rc = lq_message_new(out);
    lq_message *c = *out;
    if (rc == LQ_OK && m->payload_size) rc = lq_message_set_payload(c, m->payload, m->payload_size);
    if (rc == LQ_OK && m->group) rc = lq_message_set_group(c, m->group);
    if (rc == LQ_OK && m->partition_key) rc = lq_message_set_partition_key(c, m->partition_key);
    if (rc == LQ_OK && m->dedup_key) rc = lq_message_set_dedup_key(c, m->dedup_key);
    for (size_t i = 0; rc == LQ_OK && i < m->headers.count; i++)
        rc = lq__headers_set(&c->headers, m->headers.names[i], m->headers.values[i]);
    if (rc != LQ_OK) {
        lq_message_free(c);
        *out = NULL;
        return rc;
    }
    c->id = m->id;
    c->has_id = m->has_id;
    c->priority = m->priority;
    c->has_priority = m->has_priority;
    c->delay_ms = m->delay_ms;
    c->expires_in_ms = m->expires_in_ms;
    c->on_duplicate = m->on_duplicate;
    return LQ_OK;
}
