/* Symbol and module encoding (FORMATS.md section 1, SYMBOL and MODULE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "format_check.h"
#include "kp/alloc.h"
#include "kp/symbol.h"

typedef kp_status (*encoder)(kp_buf *, const char *, size_t);

/* Encodes `len` bytes of `text` into a fresh NUL-terminated string. */
static char *encode_with(encoder enc, const char *text, size_t len)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(enc(&b, text, len), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, '\0'), KP_OK);
    return b.data;
}

static void assert_encodes(encoder enc, const char *text, const char *expected)
{
    char *got = encode_with(enc, text, strlen(text));
    assert_string_equal(got, expected);
    kp_free(got);
}

/* The bytes FORMATS.md says must be encoded, written out independently of
 * symbol.c: ; + ( ) ' " % \ space and every control byte. */
static int must_encode(unsigned c, int module)
{
    return c < 0x20 || c == 0x7f || (c != 0 && strchr(";+()'\"%\\ ", (int)c) != NULL) ||
           (module && (c == '[' || c == ']'));
}

static void test_every_byte(void **state)
{
    (void)state;
    for (int module = 0; module <= 1; module++) {
        encoder enc = module ? kp_module_encode : kp_symbol_encode;
        for (unsigned c = 0; c < 256; c++) {
            char in = (char)c, expected[4];
            if (must_encode(c, module))
                snprintf(expected, sizeof expected, "%%%02X", c);
            else
                snprintf(expected, sizeof expected, "%c", (int)in);
            char *got = encode_with(enc, &in, 1);
            if (strcmp(got, expected) != 0)
                fail_msg("%s byte 0x%02x: got \"%s\", want \"%s\"", module ? "module" : "symbol", c,
                         got, expected);
            kp_free(got);
        }
    }
}

static void test_arrow_encodes_only_its_gt(void **state)
{
    (void)state;
    assert_encodes(kp_symbol_encode, "a->b", "a-%3Eb");
    assert_encodes(kp_symbol_encode, "->->", "-%3E-%3E");
    assert_encodes(kp_symbol_encode, "-->", "--%3E");
    assert_encodes(kp_symbol_encode, ">", ">");
    assert_encodes(kp_symbol_encode, "a>b", "a>b");
    assert_encodes(kp_symbol_encode, "<0.123.0>", "<0.123.0>");
    assert_encodes(kp_symbol_encode, "-", "-");
    assert_encodes(kp_symbol_encode, "a- >b", "a-%20>b");
    assert_encodes(kp_module_encode, "a->b", "a-%3Eb");
}

static void test_erlang_names(void **state)
{
    (void)state;
    assert_encodes(kp_symbol_encode, "++", "%2B%2B");
    assert_encodes(kp_symbol_encode, "-handle/2-fun-0-", "-handle/2-fun-0-");
    assert_encodes(kp_symbol_encode, "'quoted atom'", "%27quoted%20atom%27");
    assert_encodes(kp_symbol_encode, "a;b(c)\"d\"\\e%f", "a%3Bb%28c%29%22d%22%5Ce%25f");
    assert_encodes(kp_symbol_encode, "tab\there\r\n", "tab%09here%0D%0A");
    assert_encodes(kp_symbol_encode, " 1.5: x:", "%201.5:%20x:");
    assert_encodes(kp_module_encode, "Elixir.My Mod", "Elixir.My%20Mod");
    assert_encodes(kp_module_encode, "[kernel.kallsyms]", "%5Bkernel.kallsyms%5D");
}

static void test_utf8_passes(void **state)
{
    (void)state;
    static const char *const texts[] = {"h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac",
                                        "\xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        assert_encodes(kp_symbol_encode, texts[i], texts[i]);
        assert_encodes(kp_module_encode, texts[i], texts[i]);
    }
}

static void test_empty_and_unknown(void **state)
{
    (void)state;
    assert_encodes(kp_symbol_encode, "", "%00");
    assert_encodes(kp_module_encode, "", "%00");
    assert_encodes(kp_symbol_encode, "[unknown]", "%5Bunknown]");
    assert_encodes(kp_module_encode, "[unknown]", "%5Bunknown%5D");
    /* only the whole text is special */
    assert_encodes(kp_symbol_encode, "[unknown]x", "[unknown]x");
    assert_encodes(kp_symbol_encode, "[unknown", "[unknown");
    char *got = encode_with(kp_symbol_encode, "[unknown]", 8);
    assert_string_equal(got, "[unknown");
    kp_free(got);
}

static void test_appends_to_existing_text(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "m:"), KP_OK);
    assert_int_equal(kp_symbol_encode(&b, "a b", 3), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, '/'), KP_OK);
    assert_int_equal(kp_symbol_encode(&b, "", 0), KP_OK);
    assert_int_equal(b.len, 11);
    assert_memory_equal(b.data, "m:a%20b/%00", 11);
    kp_buf_free(&b);
}

/* Whatever the ASCII text, the encoded symbol and module make a frame line
 * the checker accepts, and decoding %XX gives the text back. */
static void test_any_ascii_text_gives_a_valid_frame(void **state)
{
    (void)state;
    char text[128];
    for (int i = 0; i < 128; i++)
        text[i] = (char)i;
    kp_buf perf = KP_BUF_INIT;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kp_buf_append_str(&perf, i ? "beam.smp 1/1 [000] 1.000002: 1 e:\n\t1 "
                                                    : "beam.smp 1/1 [000] 1.000001: 1 e:\n\t1 "),
                         KP_OK);
        size_t start = perf.len;
        assert_int_equal(kp_symbol_encode(&perf, text, sizeof text), KP_OK);
        /* decode and compare */
        char decoded[128];
        size_t n = 0;
        for (size_t k = start; k < perf.len && n < sizeof decoded; k++) {
            unsigned v;
            if (perf.data[k] == '%' && sscanf(perf.data + k + 1, "%2X", &v) == 1) {
                decoded[n++] = (char)v;
                k += 2;
            } else {
                decoded[n++] = perf.data[k];
            }
        }
        assert_int_equal(n, sizeof text);
        assert_memory_equal(decoded, text, sizeof text);
        assert_int_equal(kp_buf_append(&perf, " (", 2), KP_OK);
        assert_int_equal(kp_module_encode(&perf, text, sizeof text), KP_OK);
        assert_int_equal(kp_buf_append(&perf, ")\n\n", 3), KP_OK);
    }
    char why[256];
    if (kp_check_perf(perf.data, perf.len, why, sizeof why) != 0)
        fail_msg("%s", why);
    kp_buf_free(&perf);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    static const char *const texts[] = {"plain", "a->b;c", "", "[unknown]"};
    char fill[256];
    memset(fill, 'f', sizeof fill);
    for (int module = 0; module <= 1; module++) {
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            kp_buf b = KP_BUF_INIT;
            assert_int_equal(kp_buf_append(&b, fill, sizeof fill), KP_OK); /* full */
            kp_status st;
            long n = 0;
            for (;; n++) {
                kp_fault_alloc_after(n);
                st = (module ? kp_module_encode : kp_symbol_encode)(&b, texts[i], strlen(texts[i]));
                kp_fault_alloc_reset();
                if (st == KP_OK)
                    break;
                assert_int_equal(st, KP_ERR_NOMEM);
                assert_int_equal(b.len, sizeof fill);
                assert_memory_equal(b.data, fill, sizeof fill);
            }
            assert_int_equal(n, 1);
            assert_true(b.len > sizeof fill);
            kp_buf_free(&b);
        }
    }
    /* a length whose encoded size overflows size_t fails before reading */
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "keep"), KP_OK);
    assert_int_equal(kp_symbol_encode(&b, "x", SIZE_MAX / 3 + 1), KP_ERR_NOMEM);
    assert_int_equal(kp_module_encode(&b, "x", SIZE_MAX / 3 + 1), KP_ERR_NOMEM);
    assert_int_equal(b.len, 4);
    kp_buf_free(&b);
}

/* Decoding gives back the text of every encoded byte string, and copies a
 * '%' that starts no "%XX". */
static void test_decode(void **state)
{
    (void)state;
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    kp_buf enc = KP_BUF_INIT, dec = KP_BUF_INIT;
    assert_int_equal(kp_symbol_encode(&enc, all, sizeof all), KP_OK);
    assert_int_equal(kp_symbol_decode(&dec, enc.data, enc.len), KP_OK);
    assert_int_equal(dec.len, sizeof all);
    assert_memory_equal(dec.data, all, sizeof all);
    kp_buf_clear(&dec);
    static const char odd[] = "100% %zz %4 %4a%2f%";
    assert_int_equal(kp_symbol_decode(&dec, odd, sizeof odd - 1), KP_OK);
    assert_int_equal(dec.len, 15);
    assert_memory_equal(dec.data, "100% %zz %4 J/%", 15);
    kp_buf_free(&enc);
    kp_buf_free(&dec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte),
        cmocka_unit_test(test_arrow_encodes_only_its_gt),
        cmocka_unit_test(test_erlang_names),
        cmocka_unit_test(test_utf8_passes),
        cmocka_unit_test(test_empty_and_unknown),
        cmocka_unit_test(test_appends_to_existing_text),
        cmocka_unit_test(test_any_ascii_text_gives_a_valid_frame),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
