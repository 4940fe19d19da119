/* The JIT's perf map (sampler/cpu/perf_map.c): each kind of name a node
 * writes (lines copied from a node run with +JPperf true, OTP 25), quoted
 * and escaped atoms, malformed lines, lookups at the edges of ranges, later
 * lines replacing the ones they overlap (checked against a brute-force model
 * on random maps), a file followed as it grows with a line cut in two, and
 * out of memory at every allocation. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu/perf_map.h"
#include "faults.h"

static int add(kp_perf_map *m, const char *text)
{
    return kp_perf_map_add_text(m, text, strlen(text));
}

static void check_atom(const char *got, uint32_t got_len, const char *want)
{
    assert_non_null(got);
    assert_int_equal(got_len, strlen(want));
    assert_memory_equal(got, want, got_len);
}

/* The entry at `addr` is the Erlang function module:function/arity. */
static void check_erlang(const kp_perf_map *m, uint64_t addr, kp_jit_kind kind, const char *module,
                         const char *function, unsigned arity)
{
    const kp_jit_symbol *s = kp_perf_map_find(m, addr);
    assert_non_null(s);
    assert_int_equal(s->kind, kind);
    check_atom(s->module, s->module_len, module);
    check_atom(s->function, s->function_len, function);
    assert_int_equal(s->arity, arity);
}

static void check_runtime(const kp_perf_map *m, uint64_t addr, const char *text)
{
    const kp_jit_symbol *s = kp_perf_map_find(m, addr);
    assert_non_null(s);
    assert_int_equal(s->kind, KP_JIT_RUNTIME);
    assert_string_equal(s->text, text);
    assert_int_equal(s->text_len, strlen(text));
    assert_null(s->module);
    assert_null(s->function);
}

static void parses_each_kind(void **state)
{
    (void)state;
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    assert_int_equal(add(m, "0x7f894dc21000 68 $global::apply_fun_shared\n"
                            "0x7f88ff726480 7b0 $lists::codeHeader\n"
                            "0x7f88ff726c30 30 $lists:keyfind/3-CodeInfoPrologue\n"
                            "0x7f88ff726c60 70 $lists:keyfind/3\n"
                            "0x7f88ff73eee3 1da5 $lists::codeFooter\n"
                            "0x7fb3395ff340 100 $my mod::codeHeader\n"
                            "0x7f890c296d40 538 $erlang:garbage_collect/2\n"
                            "0x10000 10 no_dollar:f/1\n"
                            "0x20000 10 $erts_beamasm:run_process/3-CodeInfoPrologue\n"),
                     9);
    assert_int_equal(kp_perf_map_count(m), 9);
    assert_int_equal(kp_perf_map_malformed(m), 0);
    check_runtime(m, 0x7f894dc21000, "global::apply_fun_shared");
    check_runtime(m, 0x7f88ff726480, "lists::codeHeader");
    check_erlang(m, 0x7f88ff726c30, KP_JIT_PROLOGUE, "lists", "keyfind", 3);
    check_erlang(m, 0x7f88ff726c60, KP_JIT_ERLANG, "lists", "keyfind", 3);
    check_runtime(m, 0x7f88ff73eee3 + 0x1da4, "lists::codeFooter");
    /* a module's header and footer carry its name bare, spaces and all */
    check_runtime(m, 0x7fb3395ff340, "my mod::codeHeader");
    check_erlang(m, 0x7f890c296d40 + 0x100, KP_JIT_ERLANG, "erlang", "garbage_collect", 2);
    check_erlang(m, 0x10000, KP_JIT_ERLANG, "no_dollar", "f", 1);
    check_erlang(m, 0x20000, KP_JIT_PROLOGUE, "erts_beamasm", "run_process", 3);
    const kp_jit_symbol *s = kp_perf_map_find(m, 0x7f88ff726c60);
    assert_int_equal(s->start, 0x7f88ff726c60);
    assert_int_equal(s->size, 0x70);
    assert_string_equal(s->text, "lists:keyfind/3");
    s = kp_perf_map_find(m, 0x7f88ff726c30);
    assert_string_equal(s->text, "lists:keyfind/3-CodeInfoPrologue");
    kp_perf_map_free(m);
}

static void unquotes_atoms(void **state)
{
    (void)state;
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    /* as a node wrote them for a module 'my mod' and an init fun */
    assert_int_equal(add(m, "0x7f894dc279d0 30 $erl_init:'-restart/0-fun-0-'/0-CodeInfoPrologue\n"
                            "0x7f894dc27a00 50 $erl_init:'-restart/0-fun-0-'/0\n"
                            "0x7f894dc36d88 178 $init:'-collect_loaded_mfas/2-lc$^0/1-0-'/2\n"
                            "0x7fb3395ff470 28 $'my mod':'a b'/0\n"
                            "0x7fb3395ff4c8 40 $'my mod':'it\\'s'/1\n"
                            "0x7fb3395ff538 28 $'my mod':'back\\\\slash'/0\n"
                            "0x7fb3395ff590 28 $'my mod':\xc3\xbcn\xc3\xaf/0\n"
                            "0x7fb3395ff5e8 28 $'my mod':'nl\\nx'/0\n"
                            "0x1000 10 $'ctl\\001\\200':'\\t\\r\\f\\b\\v\\e\\s\\d'/255\n"
                            "0x2000 10 $'':''/0\n"
                            "0x3000 10 $m:'a:b/1'/1\n"),
                     11);
    check_erlang(m, 0x7f894dc279d0, KP_JIT_PROLOGUE, "erl_init", "-restart/0-fun-0-", 0);
    check_erlang(m, 0x7f894dc27a00, KP_JIT_ERLANG, "erl_init", "-restart/0-fun-0-", 0);
    check_erlang(m, 0x7f894dc36d88, KP_JIT_ERLANG, "init", "-collect_loaded_mfas/2-lc$^0/1-0-", 2);
    check_erlang(m, 0x7fb3395ff470, KP_JIT_ERLANG, "my mod", "a b", 0);
    check_erlang(m, 0x7fb3395ff4c8, KP_JIT_ERLANG, "my mod", "it's", 1);
    check_erlang(m, 0x7fb3395ff538, KP_JIT_ERLANG, "my mod", "back\\slash", 0);
    check_erlang(m, 0x7fb3395ff590, KP_JIT_ERLANG, "my mod", "\xc3\xbcn\xc3\xaf", 0);
    check_erlang(m, 0x7fb3395ff5e8, KP_JIT_ERLANG, "my mod", "nl\nx", 0);
    /* octal escapes: 0..31 as bytes, 128..159 as the UTF-8 the atom holds */
    check_erlang(m, 0x1000, KP_JIT_ERLANG, "ctl\001\xc2\x80", "\t\r\f\b\v\033 \177", 255);
    check_erlang(m, 0x2000, KP_JIT_ERLANG, "", "", 0);
    check_erlang(m, 0x3000, KP_JIT_ERLANG, "m", "a:b/1", 1);
    /* the text keeps the name as written */
    assert_string_equal(kp_perf_map_find(m, 0x7fb3395ff4c8)->text, "'my mod':'it\\'s'/1");
    kp_perf_map_free(m);
}

/* Names that are not mod:fun/arity are runtime names, whole. */
static void other_names_are_runtime(void **state)
{
    (void)state;
    static const char *const names[] = {
        "lists:keyfind/",
        "lists:keyfind/256",
        "lists:keyfind/1000",
        "lists:keyfind/3x",
        "lists:keyfind",
        "lists:/3",
        ":keyfind/3",
        "'unterminated:f/1",
        "m:'unterminated/1",
        "m:f/3-CodeInfo",
        "m:f/-CodeInfoPrologue",
        "-CodeInfoPrologue",
        "m :f/1",
        "m:f /1",
        "m:f/ 1",
        "m:f/1 ",
        "'m'x:f/1",
        "m:'f'x/1",
        "'m\\':f/1",
        "a\\b:f/1",
        "m::f/1",
        "\xc3\xbc \xc3\xaf:f",
        "m:f/01x",
        "m:f/+1",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        kp_perf_map *m = kp_perf_map_create();
        assert_non_null(m);
        char line[128];
        snprintf(line, sizeof line, "0x40 8 $%s", names[i]);
        assert_int_equal(add(m, line), 1);
        check_runtime(m, 0x47, names[i]);
        kp_perf_map_free(m);
    }
}

static void skips_malformed_lines(void **state)
{
    (void)state;
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    assert_int_equal(add(m, "\n"
                            "0x10\n"
                            "0x10 8\n"
                            "0x10 8 \n"
                            "0x10 8 $\n"
                            "zz 8 $a\n"
                            "0x 8 $a\n"
                            "0x10 zz $a\n"
                            "0x10 0 $zero_size\n"
                            "0xffffffffffffffff 2 $past_2_64\n"
                            "0xfffffffffffffff0 10 $up_to_2_64\n"
                            "0x1ffffffffffffffff 1 $65_bits\n"
                            "0x10 8$no_blank\n"
                            " 0x10 8 $leading_blank\n"
                            "0x100 10 $good\n"
                            "\n"
                            "\n"
                            "0x100000000000000000010 10 $too_long\n"
                            "0X200\t\t0x10   $good2 with  spaces \n"
                            "0000000000000000000300 010 $leading_zeros\n"
                            "0x400 10 $no_newline_at_the_end"),
                     4);
    assert_int_equal(kp_perf_map_malformed(m), 14);
    assert_int_equal(kp_perf_map_count(m), 4);
    check_runtime(m, 0x10f, "good");
    check_runtime(m, 0x200, "good2 with  spaces ");
    check_runtime(m, 0x30f, "leading_zeros");
    check_runtime(m, 0x400, "no_newline_at_the_end");
    assert_null(kp_perf_map_find(m, 0x10));
    assert_null(kp_perf_map_find(m, UINT64_MAX - 1));
    /* a NUL inside a name is kept, and the text is still terminated */
    static const char nul[] = "0x500 10 $a\0b\n";
    assert_int_equal(kp_perf_map_add_text(m, nul, sizeof nul - 1), 1);
    const kp_jit_symbol *s = kp_perf_map_find(m, 0x500);
    assert_int_equal(s->text_len, 3);
    assert_memory_equal(s->text, "a\0b", 4);
    /* the longest line taken, and one byte more */
    size_t len = KP_PERF_MAP_MAX_LINE + 1;
    char *line = malloc(len + 1);
    assert_non_null(line);
    memset(line, 'x', len + 1);
    memcpy(line, "0x600 10 $", 10);
    assert_int_equal(kp_perf_map_add_text(m, line, len - 1), 1);
    assert_int_equal(kp_perf_map_find(m, 0x600)->text_len, len - 1 - 10);
    assert_int_equal(kp_perf_map_add_text(m, line, len), 0);
    assert_int_equal(kp_perf_map_malformed(m), 15);
    free(line);
    kp_perf_map_free(m);
}

static void finds_at_range_edges(void **state)
{
    (void)state;
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    assert_null(kp_perf_map_find(m, 0));
    assert_int_equal(add(m, "0x1000 10 $a\n"
                            "0x1010 8 $b\n"
                            "0x1020 1 $c\n"
                            "0x0 1 $zero\n"
                            "0xfffffffffffffff0 f $top\n"),
                     5);
    assert_null(kp_perf_map_find(m, 0xfff));
    check_runtime(m, 0x1000, "a");
    check_runtime(m, 0x100f, "a");
    check_runtime(m, 0x1010, "b"); /* the end is the next one's start */
    check_runtime(m, 0x1017, "b");
    assert_null(kp_perf_map_find(m, 0x1018));
    assert_null(kp_perf_map_find(m, 0x101f));
    check_runtime(m, 0x1020, "c");
    assert_null(kp_perf_map_find(m, 0x1021));
    check_runtime(m, 0, "zero");
    assert_null(kp_perf_map_find(m, 1));
    check_runtime(m, 0xfffffffffffffff0, "top");
    check_runtime(m, 0xfffffffffffffffe, "top");
    assert_null(kp_perf_map_find(m, UINT64_MAX));
    kp_perf_map_free(m);
}

static void later_lines_win(void **state)
{
    (void)state;
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    /* a module at 0x1000, purged; another takes part of its place */
    assert_int_equal(add(m, "0x1000 100 $old::codeHeader\n"
                            "0x1100 80 $old:f/0\n"
                            "0x1180 80 $old:g/0\n"
                            "0x1200 100 $old::codeFooter\n"),
                     4);
    assert_int_equal(add(m, "0x1150 40 $new:f/0\n"), 1);
    check_runtime(m, 0x1000, "old::codeHeader");
    assert_null(kp_perf_map_find(m, 0x1100)); /* old:f/0 went whole */
    check_erlang(m, 0x1150, KP_JIT_ERLANG, "new", "f", 0);
    check_erlang(m, 0x118f, KP_JIT_ERLANG, "new", "f", 0);
    assert_null(kp_perf_map_find(m, 0x1190)); /* and old:g/0 too */
    check_runtime(m, 0x1200, "old::codeFooter");
    assert_int_equal(kp_perf_map_count(m), 3);
    /* the same module loaded again at the same place, in one call with an
     * overlap inside the call: the last line wins */
    assert_int_equal(add(m, "0x1000 100 $old::codeHeader\n"
                            "0x1100 100 $v2:f/0\n"
                            "0x1100 100 $v3:f/0\n"
                            "0x1200 100 $v3::codeFooter\n"),
                     4);
    check_erlang(m, 0x1100, KP_JIT_ERLANG, "v3", "f", 0);
    check_erlang(m, 0x1150, KP_JIT_ERLANG, "v3", "f", 0);
    check_runtime(m, 0x12ff, "v3::codeFooter");
    assert_int_equal(kp_perf_map_count(m), 3);
    /* one line over many: all go */
    assert_int_equal(add(m, "0xf00 500 $big\n"), 1);
    assert_int_equal(kp_perf_map_count(m), 1);
    check_runtime(m, 0x13ff, "big");
    /* modules below the ones there, and between them */
    assert_int_equal(add(m, "0x100 10 $low1\n0x110 10 $low2\n0x2000 10 $high\n0x1800 10 $mid\n"),
                     4);
    assert_int_equal(kp_perf_map_count(m), 5);
    check_runtime(m, 0x100, "low1");
    check_runtime(m, 0x110, "low2");
    check_runtime(m, 0x1800, "mid");
    check_runtime(m, 0x2000, "high");
    check_runtime(m, 0x1000, "big");
    kp_perf_map_free(m);
}

/* ---- a brute-force model on random maps ---------------------------------- */

typedef struct {
    uint64_t start, size;
    unsigned id;
} model_entry;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The entry holding addr: the latest line holding it, unless a line after
 * that one overlaps it. */
static long model_find(const model_entry *e, size_t n, uint64_t addr)
{
    for (size_t i = n; i-- > 0;) {
        if (addr - e[i].start >= e[i].size)
            continue;
        for (size_t j = i + 1; j < n; j++)
            if (e[j].start < e[i].start + e[i].size && e[i].start < e[j].start + e[j].size)
                return -1;
        return (long)e[i].id;
    }
    return -1;
}

static void matches_a_model(void **state)
{
    (void)state;
    enum { LINES = 600, SPACE = 4096 };
    for (int round = 0; round < 40; round++) {
        kp_perf_map *m = kp_perf_map_create();
        assert_non_null(m);
        model_entry e[LINES];
        size_t n = 0, in_text = 0;
        char text[LINES * 32];
        size_t len = 0;
        uint64_t next = rnd() % SPACE;
        while (n < LINES) {
            /* mostly ascending runs, as the JIT writes, with jumps back */
            if (rnd() % 8 == 0)
                next = rnd() % SPACE;
            uint64_t size = 1 + rnd() % (round % 2 ? 64 : 8);
            e[n] = (model_entry){next, size, (unsigned)n};
            len += (size_t)sprintf(text + len, "0x%llx %llx $e%u\n", (unsigned long long)next,
                                   (unsigned long long)size, (unsigned)n);
            next += size + rnd() % 3;
            n++;
            in_text++;
            /* in calls of a few lines to a whole map */
            if (rnd() % (round < 20 ? 50 : 2) == 0 || n == LINES) {
                assert_int_equal(kp_perf_map_add_text(m, text, len), (int)in_text);
                len = in_text = 0;
            }
        }
        uint64_t top = 0;
        for (size_t i = 0; i < n; i++)
            if (e[i].start + e[i].size > top)
                top = e[i].start + e[i].size;
        size_t live = 0;
        for (uint64_t a = 0; a <= top; a++) {
            long want = model_find(e, n, a);
            const kp_jit_symbol *s = kp_perf_map_find(m, a);
            if (want < 0) {
                assert_null(s);
                continue;
            }
            assert_non_null(s);
            char name[16];
            snprintf(name, sizeof name, "e%ld", want);
            assert_string_equal(s->text, name);
            if (s->start == a)
                live++;
        }
        assert_int_equal(kp_perf_map_count(m), live);
        kp_perf_map_free(m);
    }
}

/* ---- the followed file --------------------------------------------------- */

static void append(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void follows_a_growing_file(void **state)
{
    char path[512];
    snprintf(path, sizeof path, "%s/perf-1.map", (const char *)*state);
    kp_perf_map *m = kp_perf_map_create();
    assert_non_null(m);
    errno = 0;
    assert_int_equal(kp_perf_map_refresh(m, path), -1);
    assert_int_equal(errno, ENOENT);
    append(path, "0x1000 10 $a:f/1\n0x1010 10 $a:g/2\n0x1020 10 $a:h");
    assert_int_equal(kp_perf_map_refresh(m, path), 2);
    assert_int_equal(kp_perf_map_count(m), 2);
    assert_null(kp_perf_map_find(m, 0x1020)); /* its line is not complete */
    assert_int_equal(kp_perf_map_refresh(m, path), 0);
    append(path, "/3");
    assert_int_equal(kp_perf_map_refresh(m, path), 0);
    append(path, "\n0x1030 1");
    assert_int_equal(kp_perf_map_refresh(m, path), 1);
    check_erlang(m, 0x1020, KP_JIT_ERLANG, "a", "h", 3);
    append(path, "0 $b::codeHeader\n");
    assert_int_equal(kp_perf_map_refresh(m, path), 1);
    check_runtime(m, 0x103f, "b::codeHeader");
    assert_int_equal(kp_perf_map_malformed(m), 0);
    /* another path: refused, the map stays */
    errno = 0;
    assert_int_equal(kp_perf_map_refresh(m, "/tmp/perf-2.map"), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(kp_perf_map_count(m), 4);
    /* a line longer than any name is dropped as it comes, and the next
     * line is read */
    char *junk = malloc(KP_PERF_MAP_MAX_LINE);
    assert_non_null(junk);
    memset(junk, 'x', KP_PERF_MAP_MAX_LINE - 1);
    junk[KP_PERF_MAP_MAX_LINE - 1] = '\0';
    for (int i = 0; i < 3; i++) {
        append(path, junk);
        assert_int_equal(kp_perf_map_refresh(m, path), 0);
    }
    free(junk);
    append(path, "yyy\n0x2000 10 $after\n");
    assert_int_equal(kp_perf_map_refresh(m, path), 1);
    assert_int_equal(kp_perf_map_malformed(m), 1);
    check_runtime(m, 0x2000, "after");
    kp_perf_map_free(m);

    char name[64];
    assert_int_equal(kp_perf_map_path(4242, name, sizeof name), 0);
    assert_string_equal(name, "/tmp/perf-4242.map");
    assert_int_equal(kp_perf_map_path(4242, name, 18), -1);
}

/* A big map, as a node's first refresh reads it (over 200 reads), matches
 * the same text added at once. */
static void reads_a_big_file(void **state)
{
    char path[512];
    snprintf(path, sizeof path, "%s/perf-big.map", (const char *)*state);
    size_t cap = 40000 * 64, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (unsigned i = 0; i < 40000; i++) {
        /* modules in two regions, the way a node places them */
        uint64_t base = (i / 100) % 2 ? 0x7f0000000000 : 0x7e0000000000;
        len += (size_t)sprintf(text + len, "0x%llx 30 $mod%u:'fun %u'/%u\n",
                               (unsigned long long)(base + i * 0x40), i / 100, i, i % 256);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    kp_perf_map *m = kp_perf_map_create(), *ref = kp_perf_map_create();
    assert_non_null(m);
    assert_non_null(ref);
    assert_int_equal(kp_perf_map_refresh(m, path), 40000);
    assert_int_equal(kp_perf_map_add_text(ref, text, len), 40000);
    assert_int_equal(kp_perf_map_count(m), 40000);
    for (unsigned i = 0; i < 40000; i += 7) {
        uint64_t base = (i / 100) % 2 ? 0x7f0000000000 : 0x7e0000000000;
        const kp_jit_symbol *a = kp_perf_map_find(m, base + i * 0x40 + 0x2f);
        const kp_jit_symbol *b = kp_perf_map_find(ref, base + i * 0x40);
        assert_non_null(a);
        assert_non_null(b);
        assert_string_equal(a->text, b->text);
        assert_int_equal(a->arity, i % 256);
    }
    free(text);
    kp_perf_map_free(ref);
    kp_perf_map_free(m);
}

/* ---- out of memory -------------------------------------------------------- */

static const char oom_text[] = "0x7f894dc21000 68 $global::apply_fun_shared\n"
                               "0x7f88ff726c30 30 $lists:keyfind/3-CodeInfoPrologue\n"
                               "bad line\n"
                               "0x7f88ff726c60 70 $lists:keyfind/3\n"
                               "0x7fb3395ff4c8 40 $'my mod':'it\\'s'/1\n"
                               "0x1000 10 $low\n"
                               "0x7f88ff726c60 8 $lists:keyfind/3\n";

/* The map holds exactly the entries of `ref`. */
static void check_same(const kp_perf_map *m, const kp_perf_map *ref)
{
    static const uint64_t addrs[] = {0x7f894dc21000, 0x7f88ff726c30, 0x7f88ff726c60,
                                     0x7f88ff726c68, 0x7fb3395ff4c8, 0x1000};
    assert_int_equal(kp_perf_map_count(m), kp_perf_map_count(ref));
    assert_int_equal(kp_perf_map_malformed(m), kp_perf_map_malformed(ref));
    for (size_t i = 0; i < sizeof addrs / sizeof *addrs; i++) {
        const kp_jit_symbol *a = kp_perf_map_find(m, addrs[i]),
                            *b = kp_perf_map_find(ref, addrs[i]);
        assert_int_equal(a == NULL, b == NULL);
        if (a)
            assert_string_equal(a->text, b->text);
    }
}

static void survives_allocation_failures(void **state)
{
    kp_perf_map *ref = kp_perf_map_create();
    assert_non_null(ref);
    assert_int_equal(add(ref, oom_text), 6);

    /* add_text: a failure keeps what was added before it */
    for (long n = 0;; n++) {
        kp_fault_alloc_after(n);
        kp_perf_map *m = kp_perf_map_create();
        if (!m) {
            kp_fault_alloc_reset();
            continue;
        }
        errno = 0;
        int r = add(m, oom_text);
        kp_fault_alloc_reset();
        if (r == 6) {
            check_same(m, ref);
            kp_perf_map_free(m);
            assert_true(n > 2);
            break;
        }
        assert_int_equal(r, -1);
        assert_int_equal(errno, ENOMEM);
        assert_true(kp_perf_map_count(m) <= 6);
        for (uint64_t a = 0x7f88ff726c30; a < 0x7f88ff726cd0; a++) {
            const kp_jit_symbol *s = kp_perf_map_find(m, a);
            if (s)
                assert_true(a - s->start < s->size);
        }
        kp_perf_map_free(m);
    }

    /* refresh: what could not be added is added by the next call */
    char path[512];
    snprintf(path, sizeof path, "%s/perf-oom.map", (const char *)*state);
    append(path, oom_text);
    for (long n = 0;; n++) {
        kp_perf_map *m = kp_perf_map_create();
        assert_non_null(m);
        kp_fault_alloc_after(n);
        int r = kp_perf_map_refresh(m, path);
        int err = errno;
        kp_fault_alloc_reset();
        if (r == 6) {
            check_same(m, ref);
            kp_perf_map_free(m);
            break;
        }
        assert_int_equal(r, -1);
        assert_int_equal(err, ENOMEM);
        int again = kp_perf_map_refresh(m, path);
        assert_true(again >= 0 && again <= 6);
        check_same(m, ref);
        kp_perf_map_free(m);
    }
    kp_perf_map_free(ref);
}

static int setup_dir(void **state)
{
    *state = kp_test_tmpdir();
    return *state ? 0 : -1;
}

static int teardown_dir(void **state)
{
    kp_fault_alloc_reset();
    kp_test_rmdir(*state);
    free(*state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_each_kind),
        cmocka_unit_test(unquotes_atoms),
        cmocka_unit_test(other_names_are_runtime),
        cmocka_unit_test(skips_malformed_lines),
        cmocka_unit_test(finds_at_range_edges),
        cmocka_unit_test(later_lines_win),
        cmocka_unit_test(matches_a_model),
        cmocka_unit_test_setup_teardown(follows_a_growing_file, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(reads_a_big_file, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(survives_allocation_failures, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
