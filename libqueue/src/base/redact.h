/* Credentials never shown: URLs with their passwords as "***", and messages
 * scrubbed of a connection's password. */
#ifndef LQ_REDACT_H
#define LQ_REDACT_H

#include "base/internal.h"

/* A copy of `url` with the user info's password and the values of secret
 * query parameters (password, sslpassword, tls_passphrase) as "***"; NULL
 * when out of memory. The caller frees it. */
LQ__HIDDEN char *lq__redact_url(const char *url);
/* Replaces `secret` (a connection's password) in the thread's last error
 * message by "***": client libraries may quote what they were given. */
LQ__HIDDEN void lq__error_redact(const char *secret);

#endif
