/* The port of a port task's sample and its connected process
 * (cpu/port_owner.c), on Ports laid out in this test's own memory as a
 * node's are (the id term first; the connected pid and a pointer to the
 * name at offsets only the node knows: words 29 and 59 in OTP 25), read
 * through a reader that refuses what is not one of them:
 *   - the Port among a frame's words: the first pointing to a port's tag;
 *   - the offsets learned from the node's ports, and not before a reading
 *     parts two candidates; the same field twice taken after many
 *     readings; nothing learned from facts that match nothing, and given
 *     up after many tries;
 *   - a port's owner read again at each sample (erlang:port_connect/2);
 *   - a long name cut;
 *   - the candidate words of a frame: its registers, then its slots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/port_owner.h"

static const kp_pid_layout otp25 = {KP_PID_LAYOUT_LOW_HALF, 0, 0};

#define CONNECTED_AT 29
#define NAME_AT 59
#define ALSO_AT 95 /* a field that often holds the connected pid too */

/* A Port as the node holds it, and the memory the reader may read. */
typedef struct {
    _Alignas(8) uint64_t words[KP_PORT_WORDS];
} port;

static _Alignas(8) char tcp_inet[16] = "tcp_inet";
static _Alignas(8) char long_name[64] = "spawn /usr/bin/a-long-command --with many --options";
static port ports[3];
static uint64_t not_a_port[4] = {0x2b00000563ull, 0, 0, 0}; /* a Process: a pid first */

static int readable(uint64_t addr)
{
    const uintptr_t a = (uintptr_t)addr;
    const struct {
        const void *at;
        size_t size;
    } regions[] = {{ports, sizeof ports},
                   {not_a_port, sizeof not_a_port},
                   {tcp_inet, sizeof tcp_inet},
                   {long_name, sizeof long_name}};
    for (size_t i = 0; i < sizeof regions / sizeof regions[0]; i++) {
        uintptr_t from = (uintptr_t)regions[i].at;
        if (a >= from && a + 8 <= from + regions[i].size)
            return 1;
    }
    return 0;
}

static unsigned reads;

static int read_memory(void *ctx, const uint64_t *addrs, size_t n, uint64_t *words,
                       unsigned char *ok)
{
    (void)ctx;
    reads++;
    for (size_t i = 0; i < n; i++)
        if ((ok[i] = (unsigned char)readable(addrs[i])))
            memcpy(&words[i], (const void *)(uintptr_t)addrs[i], 8);
    return 0;
}

static uint64_t pid_term(uint32_t num)
{
    return (uint64_t)num << 4 | 0x3;
}

/* Port `i`, #Port<0.(10+i)>, connected to <0.num.0>, named `name`. */
static uint64_t make_port(size_t i, uint32_t num, const char *name, int also)
{
    memset(&ports[i], 0, sizeof ports[i]);
    ports[i].words[0] = (uint64_t)(10 + i) << 4 | 0x7;
    ports[i].words[CONNECTED_AT] = pid_term(num);
    ports[i].words[NAME_AT] = (uint64_t)(uintptr_t)name;
    ports[i].words[ALSO_AT] = also ? pid_term(num) : 0x3b; /* [] otherwise */
    return (uint64_t)(uintptr_t)&ports[i];
}

static const kp_port_fact facts[] = {
    {"tcp_inet", 8, {85, 0}},
    {"tcp_inet", 8, {90, 0}},
    {"efile", 5, {40, 0}},
};

static void test_find(void **state)
{
    (void)state;
    kp_port_owner *o = kp_port_owner_create(&otp25, read_memory, NULL);
    uint64_t p = make_port(0, 85, tcp_inet, 0), found = 0;
    uint64_t candidates[] = {42, (uint64_t)(uintptr_t)not_a_port, 0x7fff0000, p};
    assert_int_equal(kp_port_owner_find(o, candidates, 4, &found), 1);
    assert_true(found == p);
    assert_int_equal(kp_port_owner_find(o, candidates, 3, &found), 0);
    assert_int_equal(kp_port_owner_find(o, candidates, 0, &found), 0);
    assert_true(kp_port_owner_wants_facts(o));
    kp_port_owner_free(o);
}

static void test_learn(void **state)
{
    (void)state;
    kp_port_owner *o = kp_port_owner_create(&otp25, read_memory, NULL);
    uint64_t p1 = make_port(0, 85, tcp_inet, 1), p2 = make_port(1, 90, tcp_inet, 0), found;
    kp_pid_numbers who;
    char name[KP_PORT_NAME_MAX + 1];
    assert_int_equal(kp_port_owner_describe(o, p1, &who, name, sizeof name), -1);
    assert_int_equal(kp_port_owner_find(o, &p1, 1, &found), 1);
    /* words 29 and 95 both hold <0.85.0>: not yet */
    assert_int_equal(kp_port_owner_learn(o, facts, 3), 0);
    assert_false(kp_port_owner_learned(o));
    assert_int_equal(kp_port_owner_find(o, &p2, 1, &found), 1);
    assert_int_equal(kp_port_owner_learn(o, facts, 3), 1);
    assert_true(kp_port_owner_learned(o));
    assert_false(kp_port_owner_wants_facts(o));
    assert_int_equal(kp_port_owner_describe(o, p2, &who, name, sizeof name), 0);
    assert_int_equal(who.num, 90);
    assert_string_equal(name, "tcp_inet");
    /* erlang:port_connect/2 moved port 1 to <0.91.0>: read at each sample */
    ports[0].words[CONNECTED_AT] = pid_term(91);
    assert_int_equal(kp_port_owner_describe(o, p1, &who, name, sizeof name), 0);
    assert_int_equal(who.num, 91);
    /* a port being closed: no pid there any more */
    ports[0].words[CONNECTED_AT] = 0x3b;
    assert_int_equal(kp_port_owner_describe(o, p1, &who, name, sizeof name), -1);
    kp_port_owner_free(o);
}

static void test_same_field_twice(void **state)
{
    (void)state;
    kp_port_owner *o = kp_port_owner_create(&otp25, read_memory, NULL);
    uint64_t p = make_port(0, 85, tcp_inet, 1), found;
    assert_int_equal(kp_port_owner_find(o, &p, 1, &found), 1);
    int rc = 0, calls = 0;
    while (rc == 0 && calls < 100) {
        rc = kp_port_owner_learn(o, facts, 3);
        calls++;
    }
    assert_int_equal(rc, 1);
    assert_true(calls > 1);
    kp_pid_numbers who;
    char name[KP_PORT_NAME_MAX + 1];
    ports[0].words[ALSO_AT] = 0x3b; /* the first of the two was kept */
    assert_int_equal(kp_port_owner_describe(o, p, &who, name, sizeof name), 0);
    assert_int_equal(who.num, 85);
    kp_port_owner_free(o);
}

static void test_no_match_gives_up(void **state)
{
    (void)state;
    kp_port_owner *o = kp_port_owner_create(&otp25, read_memory, NULL);
    uint64_t p = make_port(0, 85, tcp_inet, 0), found;
    assert_int_equal(kp_port_owner_find(o, &p, 1, &found), 1);
    const kp_port_fact other[] = {{"udp_inet", 8, {85, 0}}, {"tcp_inet", 8, {86, 0}}};
    int rc = 0, calls = 0;
    while (rc == 0 && calls < 1000) {
        rc = kp_port_owner_learn(o, other, 2);
        calls++;
    }
    assert_int_equal(rc, -1);
    assert_false(kp_port_owner_learned(o));
    assert_false(kp_port_owner_wants_facts(o));
    assert_int_equal(kp_port_owner_learn(o, facts, 3), -1);
    kp_port_owner_free(o);
}

static void test_long_name(void **state)
{
    (void)state;
    kp_port_owner *o = kp_port_owner_create(&otp25, read_memory, NULL);
    uint64_t p = make_port(2, 40, long_name, 0), found;
    kp_port_fact fact = {long_name, strlen(long_name), {40, 0}};
    assert_true(fact.name_len > KP_PORT_NAME_MAX);
    fact.name_len = KP_PORT_NAME_MAX; /* as the agent's list is cut */
    assert_int_equal(kp_port_owner_find(o, &p, 1, &found), 1);
    assert_int_equal(kp_port_owner_learn(o, &fact, 1), 1);
    kp_pid_numbers who;
    char name[KP_PORT_NAME_MAX + 1];
    assert_int_equal(kp_port_owner_describe(o, p, &who, name, sizeof name), 0);
    assert_int_equal(strlen(name), KP_PORT_NAME_MAX);
    assert_memory_equal(name, long_name, KP_PORT_NAME_MAX);
    kp_port_owner_free(o);
}

static void test_candidates(void **state)
{
    (void)state;
    /* a stack copy from sp 0x1000: frame 1 spans 0x1010..0x1030 */
    uint64_t stack[8] = {1, 2, 0xaaa, 0xbbb, 0xccc, 0xddd, 7, 8};
    kp_cpu_sample s;
    memset(&s, 0, sizeof s);
    s.regs[KP_REG_SP] = 0x1000;
    s.stack = (const unsigned char *)stack;
    s.stack_size = sizeof stack;
    static kp_unwind_result r;
    memset(&r, 0, sizeof r);
    r.n_pcs = 3;
    r.sps[0] = 0x1000;
    r.sps[1] = 0x1010;
    r.sps[2] = 0x1030;
    r.regs[1][0] = 0x111; /* rbx */
    r.regs[1][4] = 0x444; /* r14 */
    r.regs_known[1] = 1u << 0 | 1u << 4;
    uint64_t out[KP_PORT_CANDIDATES];
    size_t n = kp_port_owner_candidates(&s, &r, 1, out);
    assert_int_equal(n, 6);
    const uint64_t want[] = {0x111, 0x444, 0xaaa, 0xbbb, 0xccc, 0xddd};
    assert_memory_equal(out, want, sizeof want);
    /* the last C frame: up to the JIT frame's sp */
    r.reached_jit = 1;
    r.jit_sp = 0x1040;
    assert_int_equal(kp_port_owner_candidates(&s, &r, 2, out), 2);
    assert_true(out[0] == 7 && out[1] == 8);
    /* past the copy: what is not in it is not read */
    r.jit_sp = 0x2000;
    assert_int_equal(kp_port_owner_candidates(&s, &r, 2, out), 2);
    assert_int_equal(kp_port_owner_candidates(&s, &r, 3, out), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_learn),
        cmocka_unit_test(test_same_field_twice),
        cmocka_unit_test(test_no_match_gives_up),
        cmocka_unit_test(test_long_name),
        cmocka_unit_test(test_candidates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
