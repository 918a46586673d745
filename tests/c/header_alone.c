#include <libqueue.h>
