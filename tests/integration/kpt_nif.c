/* A NIF whose time goes into a static function, for tests/integration/
 * debug_names: built with debug info, then stripped as a distribution
 * ships it, its debug file kept aside by build id. spin/1 runs the static
 * function for about a millisecond and counts it as a whole timeslice. */
#include <erl_nif.h>

__attribute__((noinline)) static unsigned long kpt_secret_spin(unsigned long n)
{
    unsigned long x = n;
    for (unsigned long i = 0; i < 300000; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

static ERL_NIF_TERM spin(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned long n;
    if (argc != 1 || !enif_get_ulong(env, argv[0], &n))
        return enif_make_badarg(env);
    ERL_NIF_TERM r = enif_make_ulong(env, kpt_secret_spin(n));
    /* about a millisecond: a whole timeslice, so that the process yields
     * after each call as the schedulers expect of a NIF */
    enif_consume_timeslice(env, 100);
    return r;
}

static ErlNifFunc funcs[] = {{"spin", 1, spin, 0}};

ERL_NIF_INIT(kpt_nif, funcs, NULL, NULL, NULL, NULL)
