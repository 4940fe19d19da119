/* The kernel's symbols (sampler/cpu/kernel_symbols.c): lines copied from a
 * 6.x kernel's /proc/kallsyms, code kept and data left out, lookups at the
 * edges of each symbol and of each part (the core kernel, a module, BPF),
 * symbols sharing an address named as perf names them, hidden addresses and
 * the line that explains them, malformed lines, loading from a file, out of
 * memory at every allocation, and the running kernel's own table. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include <cmocka.h>

#include "cpu/kernel_symbols.h"
#include "faults.h"

static kp_kernel_symbols *parse(const char *text)
{
    kp_kernel_symbols *ks = kp_kernel_symbols_parse(text, strlen(text));
    assert_non_null(ks);
    return ks;
}

/* `addr` is in NAME (of MODULE, or of the core kernel when NULL) at
 * `offset`. */
static void check(const kp_kernel_symbols *ks, uint64_t addr, const char *name, const char *module,
                  uint64_t offset)
{
    kp_kernel_symbol s;
    if (!kp_kernel_symbols_find(ks, addr, &s))
        fail_msg("0x%llx: no symbol, want %s", (unsigned long long)addr, name);
    assert_string_equal(s.name, name);
    if (module)
        assert_string_equal(s.module, module);
    else
        assert_null(s.module);
    assert_int_equal(s.offset, offset);
    assert_int_equal(s.start + s.offset, addr);
}

static void check_none(const kp_kernel_symbols *ks, uint64_t addr)
{
    kp_kernel_symbol s = {0};
    assert_int_equal(kp_kernel_symbols_find(ks, addr, &s), 0);
    assert_null(s.name);
}

static const char core[] = "0000000000000000 A fixed_percpu_data\n"
                           "ffffffff81000000 T _stext\n"
                           "ffffffff82266800 T __pfx_schedule\n"
                           "ffffffff82266810 T schedule\n"
                           "ffffffff822668c0 t __pfx_schedule_idle\n"
                           "ffffffff822668d0 T schedule_idle\n"
                           "ffffffff82600000 D jiffies\n"
                           "ffffffff82700000 r __ksymtab_schedule\n"
                           "ffffffff82800000 b some_bss\n"
                           "ffffffff82276f48 T _etext\n";

static void finds_code_symbols(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse(core);
    assert_int_equal(kp_kernel_symbols_count(ks), 6);
    assert_int_equal(kp_kernel_symbols_malformed(ks), 0);
    assert_false(kp_kernel_symbols_hidden(ks));
    check_none(ks, 0);
    check_none(ks, 0xffffffff80ffffff);
    check(ks, 0xffffffff81000000, "_stext", NULL, 0);
    check(ks, 0xffffffff822667ff, "_stext", NULL, 0x12667ff);
    check(ks, 0xffffffff82266810, "schedule", NULL, 0);
    check(ks, 0xffffffff82266849, "schedule", NULL, 0x39);
    check(ks, 0xffffffff822668bf, "schedule", NULL, 0xaf);
    check(ks, 0xffffffff822668c0, "__pfx_schedule_idle", NULL, 0);
    check(ks, 0xffffffff822668d0, "schedule_idle", NULL, 0);
    /* data is not code: schedule_idle goes on to _etext */
    check(ks, 0xffffffff82276f47, "schedule_idle", NULL, 0x10677);
    /* the last symbol of the core kernel: to the end of the next page */
    check(ks, 0xffffffff82276f48, "_etext", NULL, 0);
    check(ks, 0xffffffff82277fff, "_etext", NULL, 0x10b7);
    check_none(ks, 0xffffffff82278000);
    check_none(ks, UINT64_MAX);
    kp_kernel_symbols_free(ks);
}

/* kallsyms lists modules after the core kernel, and BPF programs last,
 * each at addresses of its own: not sorted as a whole. */
static const char parts[] = "ffffffffc0a01000 t nft_do_chain\t[nf_tables]\n"
                            "ffffffffc0a01200 T nft_register_chain_type\t[nf_tables]\n"
                            "ffffffffc0b00010 t veth_xmit\t[veth]\n"
                            "ffffffffc0b00400 t veth_poll\t[veth]\n"
                            "ffffffff81000000 T _stext\n"
                            "ffffffff81001000 T do_syscall_64\n"
                            "ffffffffc0a02000 t nf_tables_exit_net\t[nf_tables]\n"
                            "ffffffffa0001000 t bpf_prog_6deef7357e7b4530_sd_fw_egress\t[bpf]\n"
                            "ffffffffc0c00000 t ftrace_trampoline\t[__builtin__ftrace]\n";

static void separates_modules(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse(parts);
    assert_int_equal(kp_kernel_symbols_count(ks), 9);
    check(ks, 0xffffffff81001234, "do_syscall_64", NULL, 0x234);
    check(ks, 0xffffffff81002fff, "do_syscall_64", NULL, 0x1fff);
    check_none(ks, 0xffffffff81003000);
    check(ks, 0xffffffffa0001010, "bpf_prog_6deef7357e7b4530_sd_fw_egress", "bpf", 0x10);
    check_none(ks, 0xffffffffa0003000);
    check(ks, 0xffffffffc0a01000, "nft_do_chain", "nf_tables", 0);
    check(ks, 0xffffffffc0a011ff, "nft_do_chain", "nf_tables", 0x1ff);
    check(ks, 0xffffffffc0a01200, "nft_register_chain_type", "nf_tables", 0);
    /* a module's symbols listed apart still follow each other */
    check(ks, 0xffffffffc0a01fff, "nft_register_chain_type", "nf_tables", 0xdff);
    check(ks, 0xffffffffc0a02000, "nf_tables_exit_net", "nf_tables", 0);
    check(ks, 0xffffffffc0a03fff, "nf_tables_exit_net", "nf_tables", 0x1fff);
    check_none(ks, 0xffffffffc0a04000);
    check_none(ks, 0xffffffffc0b00000);
    check(ks, 0xffffffffc0b00010, "veth_xmit", "veth", 0);
    check(ks, 0xffffffffc0b00401, "veth_poll", "veth", 1);
    check(ks, 0xffffffffc0c00000, "ftrace_trampoline", "__builtin__ftrace", 0);
    check_none(ks, 0xffffffffc0c02000);
    kp_kernel_symbols_free(ks);
}

/* Three names for one address: perf keeps the last one listed (its
 * symbols__fixup_duplicate keeps the one symbol of non-zero size), as
 * `perf script` on this kernel showed: __x64_sys_getpid+0x19. */
static void names_an_address_as_perf(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse("ffffffff81382720 t __pfx___do_sys_getpid\n"
                                  "ffffffff81382720 T __pfx___ia32_sys_getpid\n"
                                  "ffffffff81382720 T __pfx___x64_sys_getpid\n"
                                  "ffffffff81382730 t __do_sys_getpid\n"
                                  "ffffffff81382730 T __ia32_sys_getpid\n"
                                  "ffffffff81382730 T __x64_sys_getpid\n"
                                  "ffffffff81382760 t __pfx___do_sys_gettid\n");
    assert_int_equal(kp_kernel_symbols_count(ks), 3);
    check(ks, 0xffffffff81382749, "__x64_sys_getpid", NULL, 0x19);
    check(ks, 0xffffffff8138272f, "__pfx___x64_sys_getpid", NULL, 0xf);
    kp_kernel_symbols_free(ks);
}

static void names_frames(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse(parts);
    kp_kernel_symbol s;
    char buf[64];
    assert_true(kp_kernel_symbols_find(ks, 0xffffffff81001004, &s));
    assert_int_equal(kp_kernel_symbols_frame_name(&s, buf, sizeof buf), 21);
    assert_string_equal(buf, "[kernel]do_syscall_64");
    assert_true(kp_kernel_symbols_find(ks, 0xffffffffc0a01004, &s));
    assert_int_equal(kp_kernel_symbols_frame_name(&s, buf, sizeof buf), 30);
    assert_string_equal(buf, "[kernel:nf_tables]nft_do_chain");
    assert_int_equal(kp_kernel_symbols_frame_name(&s, buf, 31), 30);
    assert_int_equal(kp_kernel_symbols_frame_name(&s, buf, 30), -1);
    kp_kernel_symbols_free(ks);
}

/* kptr_restrict, and not root: every address reads 0. */
static void sees_hidden_addresses(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse("0000000000000000 T _stext\n"
                                  "0000000000000000 T schedule\n"
                                  "0000000000000000 t nft_do_chain\t[nf_tables]\n"
                                  "0000000000000000 D jiffies\n");
    assert_true(kp_kernel_symbols_hidden(ks));
    assert_int_equal(kp_kernel_symbols_count(ks), 0);
    check_none(ks, 0);
    kp_kernel_symbols_free(ks);
    /* no code at all is not hiding */
    ks = parse("0000000000000000 A fixed_percpu_data\n");
    assert_false(kp_kernel_symbols_hidden(ks));
    kp_kernel_symbols_free(ks);
    ks = parse("");
    assert_false(kp_kernel_symbols_hidden(ks));
    assert_int_equal(kp_kernel_symbols_count(ks), 0);
    check_none(ks, 0xffffffff81000000);
    kp_kernel_symbols_free(ks);

    char line[512];
    kp_kernel_symbols_explain_hidden(1, 2, line, sizeof line);
    assert_non_null(strstr(line, "kernel.kptr_restrict is 1"));
    assert_non_null(strstr(line, "run kprof as root"));
    assert_non_null(strstr(line, "[kernel]"));
    assert_null(strchr(line, '\n'));
    kp_kernel_symbols_explain_hidden(0, 2, line, sizeof line);
    assert_non_null(strstr(line, "kernel.perf_event_paranoid is 2"));
    assert_non_null(strstr(line, "perf_event_paranoid to 1 or less"));
    kp_kernel_symbols_explain_hidden(2, -1, line, sizeof line);
    assert_non_null(strstr(line, "kernel.kptr_restrict is 2"));
    assert_non_null(strstr(line, "set kernel.kptr_restrict to 1"));
    kp_kernel_symbols_explain_hidden(-1, -1, line, sizeof line);
    assert_non_null(strstr(line, "set kernel.kptr_restrict to 0"));
    kp_kernel_symbols_explain_hidden(1, 2, line, 16);
    assert_int_equal(strlen(line), 15);
}

static void skips_malformed_lines(void **state)
{
    (void)state;
    static char long_name[KP_KERNEL_SYMBOL_MAX + 64];
    int n = snprintf(long_name, sizeof long_name, "ffffffff81000100 T ");
    memset(long_name + n, 'x', KP_KERNEL_SYMBOL_MAX + 1);
    long_name[n + KP_KERNEL_SYMBOL_MAX + 1] = '\n';
    char text[4096];
    snprintf(text, sizeof text,
             "ffffffff81000000 T good_one\n"
             "T no_address\n"
             "zzzzffff81000010 T bad_hex\n"
             "1ffffffff81000020 T seventeen_digits\n"
             "ffffffff81000030 TT two_letters\n"
             "ffffffff81000040 T\n"
             "ffffffff81000050 T \n"
             "ffffffff81000060\n"
             "ffffffff81000070 t no_bracket\tnf_tables\n"
             "ffffffff81000080 t unclosed\t[nf_tables\n"
             "ffffffff81000090 t empty_module\t[]\n"
             "ffffffff810000a0 t after_module\t[m] x\n"
             "ffffffff810000b0 t bell\x07\n"
             "\n"
             "%.*s"
             "ffffffff81000200 t good_two\t[m]  \n"
             "ffffffff81000300 t   last_without_newline",
             (int)strlen(long_name), long_name);
    kp_kernel_symbols *ks = parse(text);
    assert_int_equal(kp_kernel_symbols_malformed(ks), 13);
    assert_int_equal(kp_kernel_symbols_count(ks), 3);
    check(ks, 0xffffffff81000100, "good_one", NULL, 0x100);
    check(ks, 0xffffffff81000200, "good_two", "m", 0);
    check(ks, 0xffffffff81000300, "last_without_newline", NULL, 0);
    kp_kernel_symbols_free(ks);
    /* a name at the limit is kept */
    long_name[n + KP_KERNEL_SYMBOL_MAX] = '\n';
    ks = kp_kernel_symbols_parse(long_name, (size_t)n + KP_KERNEL_SYMBOL_MAX + 1);
    assert_non_null(ks);
    assert_int_equal(kp_kernel_symbols_count(ks), 1);
    kp_kernel_symbols_free(ks);
}

/* The top of the address space: the last page's symbol ends at 2^64 - 1. */
static void stays_below_two_to_the_64(void **state)
{
    (void)state;
    kp_kernel_symbols *ks = parse("fffffffffffff000 t top\n"
                                  "ffffffffffffe010 t below\n");
    check(ks, 0xfffffffffffff000, "top", NULL, 0);
    check_none(ks, UINT64_MAX);
    check(ks, UINT64_MAX - 1, "top", NULL, 0xffe);
    check(ks, 0xffffffffffffefff, "below", NULL, 0xfef);
    kp_kernel_symbols_free(ks);
}

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path = NULL;
    assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void loads_a_file(void **state)
{
    const char *dir = *state;
    char err[512];
    char *path = write_file(dir, "kallsyms", core);
    kp_kernel_symbols *ks = kp_kernel_symbols_load(path, err, sizeof err);
    assert_non_null(ks);
    check(ks, 0xffffffff82266849, "schedule", NULL, 0x39);
    kp_kernel_symbols_free(ks);
    free(path);

    path = write_file(dir, "hidden", "0000000000000000 T _stext\n0000000000000000 T schedule\n");
    assert_null(kp_kernel_symbols_load(path, err, sizeof err));
    assert_non_null(strstr(err, "kernel addresses are hidden"));
    assert_non_null(strstr(err, "kptr_restrict"));
    free(path);

    path = write_file(dir, "data_only", "ffffffff82600000 D jiffies\n");
    assert_null(kp_kernel_symbols_load(path, err, sizeof err));
    assert_non_null(strstr(err, "no kernel code symbol"));
    free(path);

    assert_int_equal(asprintf(&path, "%s/missing", dir) > 0, 1);
    assert_null(kp_kernel_symbols_load(path, err, sizeof err));
    assert_non_null(strstr(err, "cannot read"));
    assert_non_null(strstr(err, "No such file"));
    free(path);
}

static void survives_allocation_failures(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        kp_fault_alloc_after(n);
        errno = 0;
        kp_kernel_symbols *ks = kp_kernel_symbols_parse(parts, strlen(parts));
        int err = errno;
        kp_fault_alloc_reset();
        if (ks) {
            assert_int_equal(kp_kernel_symbols_count(ks), 9);
            check(ks, 0xffffffffc0a01004, "nft_do_chain", "nf_tables", 4);
            kp_kernel_symbols_free(ks);
            assert_true(n > 2);
            break;
        }
        assert_int_equal(err, ENOMEM);
    }
}

/* The running kernel: `schedule` names its own address, when the kernel
 * shows its addresses to this user. */
static void reads_the_running_kernel(void **state)
{
    (void)state;
    char err[512];
    kp_kernel_symbols *ks = kp_kernel_symbols_load(KP_KALLSYMS_PATH, err, sizeof err);
    if (!ks) {
        print_message("skipped: %s\n", err);
        skip();
    }
    /* the address as the file says it */
    FILE *f = fopen(KP_KALLSYMS_PATH, "re");
    assert_non_null(f);
    char line[1024];
    unsigned long long addr = 0;
    while (fgets(line, sizeof line, f)) {
        char type, name[600];
        unsigned long long a;
        if (sscanf(line, "%llx %c %599s", &a, &type, name) == 3 && strcmp(name, "schedule") == 0 &&
            type == 'T') {
            addr = a;
            break;
        }
    }
    fclose(f);
    assert_true(addr != 0);
    assert_true(kp_kernel_symbols_count(ks) > 1000);
    check(ks, addr, "schedule", NULL, 0);
    check(ks, addr + 4, "schedule", NULL, 4);
    kp_kernel_symbol s;
    char frame[KP_KERNEL_SYMBOL_MAX + 32];
    assert_true(kp_kernel_symbols_find(ks, addr + 4, &s));
    assert_int_equal(kp_kernel_symbols_frame_name(&s, frame, sizeof frame), 16);
    assert_string_equal(frame, "[kernel]schedule");
    kp_kernel_symbols_free(ks);
}

static int setup_dir(void **state)
{
    *state = kp_test_tmpdir();
    return *state ? 0 : -1;
}

static int teardown_dir(void **state)
{
    kp_test_rmdir(*state);
    free(*state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finds_code_symbols),
        cmocka_unit_test(separates_modules),
        cmocka_unit_test(names_an_address_as_perf),
        cmocka_unit_test(names_frames),
        cmocka_unit_test(sees_hidden_addresses),
        cmocka_unit_test(skips_malformed_lines),
        cmocka_unit_test(stays_below_two_to_the_64),
        cmocka_unit_test_setup_teardown(loads_a_file, setup_dir, teardown_dir),
        cmocka_unit_test(survives_allocation_failures),
        cmocka_unit_test(reads_the_running_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
