#include "core/room.h"

int lq__room_share(const lq__room *r, int mine, bool starved) {
    int left = r->budget - r->taken;
    if (mine == 0) return left;
    return left - (r->starved - (starved ? 1 : 0));
}
