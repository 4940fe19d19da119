/* An erl_tracer NIF that does nothing with its events, for
 * tests/bench/rtrace_overhead: a process traced with kprof's flags and call
 * patterns, its events given to this tracer, costs what the VM's own
 * tracing costs (breakpoints, the events' terms, two NIF calls an event).
 * That is the floor under kprof's request traces: no tracer NIF that looks
 * at its events costs less. */
#include <erl_nif.h>

static ERL_NIF_TERM a_trace, a_ok;

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    a_trace = enif_make_atom(env, "trace");
    a_ok = enif_make_atom(env, "ok");
    return 0;
}

/* every event, and trace_status, is taken */
static ERL_NIF_TERM enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    return a_trace;
}

static ERL_NIF_TERM trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    return a_ok;
}

static ErlNifFunc funcs[] = {{"enabled", 3, enabled, 0}, {"trace", 5, trace, 0}};

ERL_NIF_INIT(kprof_bench_null, funcs, load, NULL, NULL, NULL)
