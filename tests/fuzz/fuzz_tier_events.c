/* Fuzz target: any bytes as one trace-port frame of `kprof tiers`
 * (tiers/events.c), decoded against a few known tier functions. Decoding
 * must stay inside the frame and end in a verdict; a decoded event names a
 * known function and a short identity. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const kp_tier_mfa mfas[] = {
        {"m", "f", 1, 0}, {"kprof_kv_db", "get", 2, 1}, {"lists", "seq", 2, 0}};
    kp_tier_decoder d;
    memset(&d, 0, sizeof d);
    d.mfas = mfas;
    d.n = sizeof mfas / sizeof mfas[0];
    char *copy = malloc(size ? size : 1); /* exactly the frame: ASan sees any overread */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    kp_tier_event ev;
    if (kp_tier_decode(&d, copy, size, &ev) == 1 && ev.identity &&
        ev.identity_len >= sizeof d.identity)
        abort();
    free(copy);
    return 0;
}
