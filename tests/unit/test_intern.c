/* kp_frames and kp_stacks: what a frame shows (symbol and module column,
 * encoded per FORMATS.md), which frames are the same, root-first stacks with
 * stable ids, and allocation failures that change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/intern.h"

static int reset_faults(void **state)
{
    (void)state;
    kp_fault_alloc_reset();
    return 0;
}

static kp_mfa mfa(const char *module, const char *function, unsigned arity, unsigned line)
{
    kp_mfa m = {module, strlen(module), function, strlen(function), arity, line};
    return m;
}

static uint32_t frame(kp_frames *f, const char *module, const char *function, unsigned arity,
                      unsigned line)
{
    kp_mfa m = mfa(module, function, arity, line);
    uint32_t id = UINT32_MAX;
    assert_int_equal(kp_frames_intern_mfa(f, &m, &id), KP_OK);
    return id;
}

static uint32_t pseudo(kp_frames *f, const char *text, size_t len, const char *kind)
{
    uint32_t id = UINT32_MAX;
    assert_int_equal(kp_frames_intern_pseudo(f, text, len, kind, &id), KP_OK);
    return id;
}

static void assert_frame_text(const kp_frames *f, uint32_t id, const char *symbol,
                              const char *module)
{
    size_t len = SIZE_MAX;
    const char *s = kp_frames_symbol(f, id, &len);
    assert_int_equal(len, strlen(symbol));
    assert_memory_equal(s, symbol, len);
    s = kp_frames_module(f, id, &len);
    assert_int_equal(len, strlen(module));
    assert_memory_equal(s, module, len);
}

static void test_mfa_frames(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(0);
    assert_non_null(f);
    assert_int_equal(frame(f, "my_mod", "loop", 1, 0), 0);
    assert_int_equal(frame(f, "my_mod", "collect", 1, 0), 1);
    assert_int_equal(frame(f, "my_mod", "loop", 2, 0), 2);   /* arity counts */
    assert_int_equal(frame(f, "other", "loop", 1, 0), 3);    /* module counts */
    assert_int_equal(frame(f, "my_mod", "loop", 1, 0), 0);   /* stable */
    assert_int_equal(frame(f, "my_mod", "loop", 1, 120), 0); /* lines ignored */
    assert_int_equal(kp_frames_count(f), 4);
    assert_frame_text(f, 0, "my_mod:loop/1", "my_mod.beam");
    assert_frame_text(f, 2, "my_mod:loop/2", "my_mod.beam");
    assert_frame_text(f, 3, "other:loop/1", "other.beam");

    /* the boundary between module and function is part of the identity,
     * even where the display text is the same */
    uint32_t a = frame(f, "ab", "c", 0, 0), b = frame(f, "a", "bc", 0, 0);
    uint32_t c = frame(f, "a:b", "c", 0, 0), d = frame(f, "a", "b:c", 0, 0);
    assert_int_not_equal(a, b);
    assert_int_not_equal(c, d);
    assert_frame_text(f, c, "a:b:c/0", "a:b.beam");
    assert_frame_text(f, d, "a:b:c/0", "a.beam");
    assert_int_equal(kp_frames_count(f), 8);
    kp_frames_free(f);
    kp_frames_free(NULL);
}

static void test_mfa_with_lines(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(KP_FRAMES_LINES);
    assert_non_null(f);
    uint32_t l42 = frame(f, "my_mod", "loop", 1, 42);
    uint32_t l43 = frame(f, "my_mod", "loop", 1, 43);
    uint32_t none = frame(f, "my_mod", "loop", 1, 0);
    assert_int_not_equal(l42, l43);
    assert_int_not_equal(l42, none);
    assert_int_equal(frame(f, "my_mod", "loop", 1, 42), l42);
    assert_frame_text(f, l42, "my_mod:loop/1:42", "my_mod.beam");
    assert_frame_text(f, l43, "my_mod:loop/1:43", "my_mod.beam");
    assert_frame_text(f, none, "my_mod:loop/1", "my_mod.beam");
    assert_int_equal(kp_frames_count(f), 3);
    kp_frames_free(f);
}

/* Atoms arrive unquoted; what a consumer would rewrite is percent-encoded. */
static void test_mfa_encoding(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(0);
    assert_non_null(f);
    uint32_t id = frame(f, "erlang", "++", 2, 0);
    assert_frame_text(f, id, "erlang:%2B%2B/2", "erlang.beam");
    id = frame(f, "my mod", "a;b(c)'\"%\\", 0, 0);
    assert_frame_text(f, id, "my%20mod:a%3Bb%28c%29%27%22%25%5C/0", "my%20mod.beam");
    id = frame(f, "m", "a->b", 3, 0);
    assert_frame_text(f, id, "m:a-%3Eb/3", "m.beam");
    id = frame(f, "m", "x>y", 3, 0); /* a '>' not after '-' stays */
    assert_frame_text(f, id, "m:x>y/3", "m.beam");
    id = frame(f, "[m]", "-fun-0-/1", 0, 0); /* '[' only encoded in the module column */
    assert_frame_text(f, id, "[m]:-fun-0-/1/0", "%5Bm%5D.beam");
    id = frame(f, "caf\xc3\xa9", "tab\there", 1, 0); /* UTF-8 kept, control encoded */
    assert_frame_text(f, id, "caf\xc3\xa9:tab%09here/1", "caf\xc3\xa9.beam");
    kp_frames_free(f);
}

static void test_pseudo_frames(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(0);
    assert_non_null(f);
    uint32_t pid = pseudo(f, "<0.123.0>", 9, "process");
    uint32_t status = pseudo(f, "running", 7, "status");
    assert_int_equal(pid, 0);
    assert_int_equal(status, 1);
    assert_int_equal(pseudo(f, "<0.123.0>", 9, "process"), pid);
    assert_frame_text(f, pid, "<0.123.0>", "process");
    assert_frame_text(f, status, "running", "status");

    /* same text, another kind: another frame */
    uint32_t as_status = pseudo(f, "running", 7, "process");
    assert_int_not_equal(as_status, status);
    /* the kind/text boundary is part of the identity */
    assert_int_not_equal(pseudo(f, "c", 1, "ab"), pseudo(f, "bc", 2, "a"));

    /* a pseudo-frame never equals a function frame, even with the same text */
    uint32_t fn = frame(f, "my_mod", "loop", 1, 0);
    uint32_t fake = pseudo(f, "my_mod:loop/1", 13, "my_mod.beam");
    assert_int_not_equal(fn, fake);
    assert_frame_text(f, fake, "my_mod:loop/1", "my_mod.beam");
    /* nor a function frame whose fields, laid end to end, hold the same bytes
     * (arity 0x61616161 reads "aaaa", then line 0 and the module length) */
    static const char tricky[] = {0, 0, 0, 1, 0, 0, 0, 'm', 'f'};
    uint32_t odd = frame(f, "m", "f", 0x61616161u, 0);
    assert_int_not_equal(pseudo(f, tricky, sizeof tricky, "aaaa"), odd);

    /* encoded: empty text, [unknown], NUL and spaces, module column rules */
    assert_frame_text(f, pseudo(f, "", 0, "status"), "%00", "status");
    assert_frame_text(f, pseudo(f, "[unknown]", 9, "status"), "%5Bunknown]", "status");
    assert_frame_text(f, pseudo(f, "a\0b c", 5, "my kind"), "a%00b%20c", "my%20kind");
    assert_frame_text(f, pseudo(f, "x", 1, "[k]"), "x", "%5Bk%5D");
    assert_int_not_equal(pseudo(f, "a", 1, "status"), pseudo(f, "a\0", 2, "status"));
    kp_frames_free(f);
}

/* a module's code that is none of its functions (the JIT's
 * "$Elixir.MyApp.Hot::codeHeader") names its module as its functions do */
static void test_frames_in_a_module(void **state)
{
    (void)state;
    for (unsigned flags = 0; flags <= KP_FRAMES_ERLANG_NAMES; flags += KP_FRAMES_ERLANG_NAMES) {
        kp_frames *f = kp_frames_create(flags);
        assert_non_null(f);
        uint32_t ids[3];
        static const char *const modules[] = {"Elixir.MyApp.Hot", "lists", "my mod"};
        for (int i = 0; i < 3; i++)
            assert_int_equal(kp_frames_intern_in_module(f, "[jit]", modules[i], strlen(modules[i]),
                                                        "::codeHeader", 12, "jit", &ids[i]),
                             KP_OK);
        const char *elixir = "[jit]MyApp.Hot::codeHeader";
        if (flags)
            elixir = "[jit]Elixir.MyApp.Hot::codeHeader";
        assert_frame_text(f, ids[0], elixir, "jit");
        assert_frame_text(f, ids[1], "[jit]lists::codeHeader", "jit");
        assert_frame_text(f, ids[2], "[jit]my%20mod::codeHeader", "jit");
        /* the same frame as the pseudo-frame of that text */
        assert_int_equal(pseudo(f, "[jit]lists::codeHeader", 22, "jit"), ids[1]);
        kp_frames_free(f);
    }
}

static void test_many_frames_dense_and_stable(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(KP_FRAMES_LINES);
    assert_non_null(f);
    char fun[32], want[64];
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(fun, sizeof fun, "f%u", i % 500);
        assert_int_equal(frame(f, "m", fun, i / 500, i + 1), i);
    }
    for (unsigned i = 20000; i-- > 0;) {
        snprintf(fun, sizeof fun, "f%u", i % 500);
        assert_int_equal(frame(f, "m", fun, i / 500, i + 1), i);
        snprintf(want, sizeof want, "m:f%u/%u:%u", i % 500, i / 500, i + 1);
        assert_frame_text(f, i, want, "m.beam");
    }
    assert_int_equal(kp_frames_count(f), 20000);
    kp_frames_free(f);
}

static void test_stacks(void **state)
{
    (void)state;
    kp_stacks *s = kp_stacks_create();
    assert_non_null(s);
    const uint32_t abc[] = {0, 1, 2}, ab[] = {0, 1}, cba[] = {2, 1, 0};
    const uint32_t big_small[] = {1, 256}, small_big[] = {256, 1};
    uint32_t id;
    assert_int_equal(kp_stacks_intern(s, abc, 3, &id), KP_OK);
    assert_int_equal(id, 0);
    assert_int_equal(kp_stacks_intern(s, ab, 2, &id), KP_OK); /* a prefix is another stack */
    assert_int_equal(id, 1);
    assert_int_equal(kp_stacks_intern(s, cba, 3, &id), KP_OK); /* order counts */
    assert_int_equal(id, 2);
    assert_int_equal(kp_stacks_intern(s, NULL, 0, &id), KP_OK); /* the empty stack */
    assert_int_equal(id, 3);
    assert_int_equal(kp_stacks_intern(s, big_small, 2, &id), KP_OK);
    assert_int_equal(id, 4);
    assert_int_equal(kp_stacks_intern(s, small_big, 2, &id), KP_OK);
    assert_int_equal(id, 5);
    assert_int_equal(kp_stacks_intern(s, abc, 3, &id), KP_OK);
    assert_int_equal(id, 0);
    assert_int_equal(kp_stacks_intern(s, abc, 0, &id), KP_OK); /* empty, any pointer */
    assert_int_equal(id, 3);
    assert_int_equal(kp_stacks_count(s), 6);

    size_t n = 99;
    const uint32_t *got = kp_stacks_get(s, 0, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(got, abc, sizeof abc); /* root first, as given */
    got = kp_stacks_get(s, 2, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(got, cba, sizeof cba);
    kp_stacks_get(s, 3, &n);
    assert_int_equal(n, 0);
    kp_stacks_free(s);
    kp_stacks_free(NULL);
}

/* Many deep stacks: ids stay put while the table grows; repeats cost nothing. */
static void test_many_stacks_and_memory(void **state)
{
    (void)state;
    kp_stacks *s = kp_stacks_create();
    assert_non_null(s);
    uint32_t ids[64];
    uint32_t id;
    for (uint32_t i = 0; i < 5000; i++) {
        size_t depth = 1 + i % 64;
        for (size_t k = 0; k < depth; k++)
            ids[k] = (uint32_t)(k * 7 + i);
        assert_int_equal(kp_stacks_intern(s, ids, depth, &id), KP_OK);
        assert_int_equal(id, i);
    }
    size_t mem = kp_stacks_memory(s);
    for (int round = 0; round < 20; round++)
        for (uint32_t i = 0; i < 5000; i++) {
            size_t depth = 1 + i % 64, n;
            for (size_t k = 0; k < depth; k++)
                ids[k] = (uint32_t)(k * 7 + i);
            assert_int_equal(kp_stacks_intern(s, ids, depth, &id), KP_OK);
            assert_int_equal(id, i);
            const uint32_t *got = kp_stacks_get(s, id, &n);
            assert_int_equal(n, depth);
            assert_memory_equal(got, ids, depth * sizeof *ids);
        }
    assert_int_equal(kp_stacks_memory(s), mem);
    assert_int_equal(kp_stacks_count(s), 5000);
    kp_stacks_free(s);

    kp_frames *f = kp_frames_create(0);
    assert_non_null(f);
    frame(f, "m", "f", 0, 0);
    mem = kp_frames_memory(f);
    for (int i = 0; i < 10000; i++)
        frame(f, "m", "f", 0, (unsigned)i); /* lines off: always the same frame */
    assert_int_equal(kp_frames_memory(f), mem);
    kp_frames_free(f);
}

static void test_create_out_of_memory(void **state)
{
    (void)state;
    int frames_done = 0, stacks_done = 0;
    for (long n = 0; !(frames_done && stacks_done); n++) {
        assert_true(n < 100);
        kp_fault_alloc_after(n);
        kp_frames *f = frames_done ? NULL : kp_frames_create(KP_FRAMES_LINES);
        kp_fault_alloc_after(n);
        kp_stacks *s = stacks_done ? NULL : kp_stacks_create();
        kp_fault_alloc_reset();
        if (f) {
            assert_int_equal(kp_frames_count(f), 0);
            assert_int_equal(frame(f, "m", "f", 0, 0), 0);
            frames_done = 1;
        }
        if (s) {
            assert_int_equal(kp_stacks_count(s), 0);
            stacks_done = 1;
        }
        kp_frames_free(f);
        kp_stacks_free(s);
    }
}

/* Each frame added under every possible allocation failure: KP_ERR_NOMEM,
 * nothing added, earlier frames intact; then the same call succeeds. */
static void test_frames_out_of_memory(void **state)
{
    (void)state;
    kp_frames *f = kp_frames_create(KP_FRAMES_LINES);
    assert_non_null(f);
    char fun[64], text[64];
    long failures = 0;
    for (uint32_t i = 0; i < 150; i++) {
        snprintf(fun, sizeof fun, "fun+%u", i); /* '+' makes the symbol encoded */
        snprintf(text, sizeof text, "<0.%u.0>", i);
        int is_pseudo = i % 3 == 2;
        for (long n = 0;; n++) {
            assert_true(n < 20);
            uint32_t id = 777;
            kp_status st;
            kp_mfa m = mfa("mod", fun, i % 4, i);
            kp_fault_alloc_after(n);
            if (is_pseudo)
                st = kp_frames_intern_pseudo(f, text, strlen(text), "process", &id);
            else
                st = kp_frames_intern_mfa(f, &m, &id);
            kp_fault_alloc_reset();
            if (st == KP_OK) {
                assert_int_equal(id, i);
                break;
            }
            failures++;
            assert_int_equal(st, KP_ERR_NOMEM);
            assert_int_equal(kp_frames_count(f), i);
        }
        /* every frame so far still shows what it showed */
        char want[96];
        for (uint32_t j = 0; j <= i; j++) {
            if (j % 3 == 2) {
                snprintf(want, sizeof want, "<0.%u.0>", j);
                assert_frame_text(f, j, want, "process");
            } else {
                int n = snprintf(want, sizeof want, "mod:fun%%2B%u/%u", j, j % 4);
                if (j) /* line j; line 0 means unknown: no suffix */
                    snprintf(want + n, sizeof want - (size_t)n, ":%u", j);
                assert_frame_text(f, j, want, "mod.beam");
            }
        }
    }
    assert_true(failures > 10);
    kp_frames_free(f);
}

static void test_stacks_out_of_memory(void **state)
{
    (void)state;
    kp_stacks *s = kp_stacks_create();
    assert_non_null(s);
    uint32_t ids[300];
    long failures = 0;
    for (uint32_t i = 0; i < 300; i++) {
        ids[i] = i * 3;
        for (long n = 0;; n++) {
            assert_true(n < 10);
            uint32_t id = 777;
            kp_fault_alloc_after(n);
            kp_status st = kp_stacks_intern(s, ids, i + 1, &id);
            kp_fault_alloc_reset();
            if (st == KP_OK) {
                assert_int_equal(id, i);
                break;
            }
            failures++;
            assert_int_equal(st, KP_ERR_NOMEM);
            assert_int_equal(kp_stacks_count(s), i);
        }
    }
    for (uint32_t i = 0; i < 300; i++) {
        size_t n;
        const uint32_t *got = kp_stacks_get(s, i, &n);
        assert_int_equal(n, i + 1);
        assert_memory_equal(got, ids, n * sizeof *ids);
    }
    assert_true(failures > 3);
    kp_stacks_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_mfa_frames, reset_faults),
        cmocka_unit_test_teardown(test_mfa_with_lines, reset_faults),
        cmocka_unit_test_teardown(test_mfa_encoding, reset_faults),
        cmocka_unit_test_teardown(test_pseudo_frames, reset_faults),
        cmocka_unit_test_teardown(test_frames_in_a_module, reset_faults),
        cmocka_unit_test_teardown(test_many_frames_dense_and_stable, reset_faults),
        cmocka_unit_test_teardown(test_stacks, reset_faults),
        cmocka_unit_test_teardown(test_many_stacks_and_memory, reset_faults),
        cmocka_unit_test_teardown(test_create_out_of_memory, reset_faults),
        cmocka_unit_test_teardown(test_frames_out_of_memory, reset_faults),
        cmocka_unit_test_teardown(test_stacks_out_of_memory, reset_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
