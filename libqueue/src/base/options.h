/* Option sets: typed values keyed by lq_option, with the documented defaults. */
#ifndef LQ_OPTIONS_H
#define LQ_OPTIONS_H

#include "base/internal.h"

/* An option's value, or its default when unset (or when `options` is NULL). */
LQ__HIDDEN int64_t lq__opt_int(const lq_options *options, int option);
/* A string option, or NULL when unset. Owned by the option set. */
LQ__HIDDEN const char *lq__opt_str(const lq_options *options, int option);
LQ__HIDDEN bool lq__opt_is_set(const lq_options *options, int option);



/* A copy the library keeps (an empty set when `options` is NULL). */
LQ__HIDDEN int lq__options_copy(lq_options **out, const lq_options *options);
#endif
