/* Names of native frames (sampler/cpu/native_names.c) and the start of an
 * unnamed function (sampler/cpu/eh_frame_hdr.c): C++ names demangled
 * without their parameters, C names kept, "FILE@0xSTART" for a function
 * without a symbol; the .eh_frame_hdr search on a table built here (its
 * bounds, and malformed tables) and on this binary's own table, where each
 * address of a static function finds that function's start. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <link.h>

#include <cmocka.h>

#include "cpu/eh_frame_hdr.h"
#include "cpu/native_names.h"

static void demangled(const char *mangled, const char *want)
{
    char out[256];
    size_t n = kp_demangle(mangled, out, sizeof out);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
}

static void demangles_cxx_names_without_parameters(void **state)
{
    (void)state;
    demangled("_Z17beam_jit_call_bifP7processPmPKvPFmS0_S1_S3_Em", "beam_jit_call_bif");
    demangled("_ZN19BeamGlobalAssembler24emit_i_test_yield_sharedEv",
              "BeamGlobalAssembler::emit_i_test_yield_shared");
    demangled("_ZNK3Foo3barEi", "Foo::bar");                            /* const method */
    demangled("_ZN12_GLOBAL__N_13bazEv", "(anonymous namespace)::baz"); /* kept whole */
    demangled("_ZN3FooIiE3getEv", "Foo<int>::get");
    /* C names and what does not demangle stay as they are */
    demangled("erts_schedule", "erts_schedule");
    demangled("_Znotmangled", "_Znotmangled");
    demangled("_Z", "_Z");
    char small[8];
    assert_int_equal(
        kp_demangle("_ZN19BeamGlobalAssembler24emit_i_test_yield_sharedEv", small, sizeof small),
        7);
}

static void names_frames(void **state)
{
    (void)state;
    char out[128];
    kp_native_symbol vm = {"erts_schedule", "beam.smp", 0x7ddc0, 0x10, 0};
    kp_native_frame_text(&vm, out, sizeof out);
    assert_string_equal(out, "[vm]erts_schedule");
    kp_native_symbol lib = {"_ZNK3Foo3barEi", "libfoo.so", 0x100, 0, 0};
    kp_native_frame_text(&lib, out, sizeof out);
    assert_string_equal(out, "[libfoo.so]Foo::bar");
    /* unnamed: its function's start, so two never merge */
    kp_native_symbol a = {NULL, "beam.smp", 0x73f01, 0, 0x73ee0};
    kp_native_symbol b = {NULL, "beam.smp", 0x74208, 0, 0x741f0};
    char other[128];
    kp_native_frame_text(&a, out, sizeof out);
    kp_native_frame_text(&b, other, sizeof other);
    assert_string_equal(out, "[vm]beam.smp@0x73ee0");
    assert_string_equal(other, "[vm]beam.smp@0x741f0");
    kp_native_symbol bare = {NULL, "libnif.so", 0x1234, 0, 0};
    kp_native_frame_text(&bare, out, sizeof out);
    assert_string_equal(out, "[libnif.so]libnif.so@0x1234?");
    char cut[6];
    assert_int_equal(kp_native_frame_text(&a, cut, sizeof cut), 5);
    assert_string_equal(cut, "[vm]b");
}

/* A table as linkers write it: version 1, eh_frame_ptr pcrel sdata4,
 * count udata4, entries datarel sdata4, at address `at`. */
static size_t table(unsigned char *buf, uint64_t at, const uint64_t *starts, size_t n)
{
    size_t k = 0;
    buf[k++] = 1;
    buf[k++] = 0x1b;
    buf[k++] = 0x03;
    buf[k++] = 0x3b;
    memset(buf + k, 0, 4); /* eh_frame_ptr: not read */
    k += 4;
    uint32_t count = (uint32_t)n;
    memcpy(buf + k, &count, 4);
    k += 4;
    for (size_t i = 0; i < n; i++) {
        int32_t loc = (int32_t)(starts[i] - at), fde = 0;
        memcpy(buf + k, &loc, 4);
        memcpy(buf + k + 4, &fde, 4);
        k += 8;
    }
    return k;
}

static void finds_function_starts(void **state)
{
    (void)state;
    unsigned char buf[256];
    const uint64_t at = 0x300000;
    const uint64_t starts[] = {0x1000, 0x1040, 0x2000, 0x400000}; /* one above the table */
    size_t len = table(buf, at, starts, 4);
    uint64_t s = 0;
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0xfff, &s), -1);
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x1000, &s), 0);
    assert_int_equal(s, 0x1000);
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x103f, &s), 0);
    assert_int_equal(s, 0x1000);
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x1040, &s), 0);
    assert_int_equal(s, 0x1040);
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x3fffff, &s), 0);
    assert_int_equal(s, 0x2000);
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x500000, &s), 0);
    assert_int_equal(s, 0x400000);
    /* malformed: truncated entries, another version, an unread encoding */
    assert_int_equal(kp_eh_frame_hdr_find(buf, len - 1, at, 0x1040, &s), -1);
    assert_int_equal(kp_eh_frame_hdr_find(buf, 11, at, 0x1040, &s), -1);
    assert_int_equal(kp_eh_frame_hdr_find(NULL, 0, at, 0x1040, &s), -1);
    buf[0] = 2;
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x1040, &s), -1);
    buf[0] = 1;
    buf[3] = 0x1b; /* pcrel entries: no binary search over them */
    assert_int_equal(kp_eh_frame_hdr_find(buf, len, at, 0x1040, &s), -1);
}

/* Two static functions of this binary, without names in the search. */
__attribute__((noinline)) static int first_probe(int x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 3 + 1;
}

__attribute__((noinline)) static int second_probe(int x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 5 + 2;
}

typedef struct {
    const unsigned char *hdr;
    size_t len;
    uint64_t bias, vaddr;
} own_table;

static int find_own(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    own_table *t = data;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
            t->bias = info->dlpi_addr;
            t->vaddr = info->dlpi_phdr[i].p_vaddr;
            t->hdr = (const unsigned char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
            t->len = info->dlpi_phdr[i].p_memsz;
            return 1; /* the executable comes first */
        }
    return 0;
}

static void finds_this_binarys_functions(void **state)
{
    (void)state;
    own_table t = {0};
    assert_int_equal(dl_iterate_phdr(find_own, &t), 1);
    uint64_t f1 = (uint64_t)(uintptr_t)first_probe - t.bias;
    uint64_t f2 = (uint64_t)(uintptr_t)second_probe - t.bias;
    assert_int_equal(first_probe(1) + second_probe(1), 11);
    uint64_t s = 0;
    for (uint64_t off = 0; off < 4; off++) {
        assert_int_equal(kp_eh_frame_hdr_find(t.hdr, t.len, t.vaddr, f1 + off, &s), 0);
        assert_int_equal(s, f1);
        assert_int_equal(kp_eh_frame_hdr_find(t.hdr, t.len, t.vaddr, f2 + off, &s), 0);
        assert_int_equal(s, f2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(demangles_cxx_names_without_parameters),
        cmocka_unit_test(names_frames),
        cmocka_unit_test(finds_function_starts),
        cmocka_unit_test(finds_this_binarys_functions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
