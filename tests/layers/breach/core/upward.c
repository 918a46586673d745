/* A core source that reaches up into the runtime: check_layers must refuse it. */
#include "runtime/above.h"
