/* Function frame names (frame_name.h): Erlang's notation for Erlang modules,
 * Elixir 1.14's Exception.format_mfa/3 for Elixir ones. Every expected
 * Elixir name below is what `elixir -e 'IO.puts Exception.format_mfa(M, F,
 * A)'` printed with Elixir 1.14.0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/alloc.h"
#include "kp/frame_name.h"
#include "kp/symbol.h"

static char *name_of(const char *module, const char *function, unsigned arity, kp_names names)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(
        kp_frame_name(&b, module, strlen(module), function, strlen(function), arity, names), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, '\0'), KP_OK);
    return b.data;
}

static void check(const char *module, const char *function, unsigned arity, kp_names names,
                  const char *expected)
{
    char *got = name_of(module, function, arity, names);
    assert_string_equal(got, expected);
    kp_free(got);
}

#define ELIXIR(m, f, a, expected) check(m, f, a, KP_NAMES_ELIXIR, expected)

static void test_elixir_modules(void **state)
{
    (void)state;
    ELIXIR("Elixir.MyApp.Hot", "spin", 2, "MyApp.Hot.spin/2");
    ELIXIR("Elixir.Hot", "spin", 0, "Hot.spin/0");
    ELIXIR("Elixir.A.B.C.D", "f_2", 0, "A.B.C.D.f_2/0");
    ELIXIR("Elixir.MyApp.Hot", "valid?", 1, "MyApp.Hot.valid?/1");
    ELIXIR("Elixir.MyApp.Hot", "__info__", 1, "MyApp.Hot.__info__/1");
    ELIXIR("Elixir.MyApp.V2_Api", "run!", 1, "MyApp.V2_Api.run!/1");
    /* Elixir.Elixir.Foo keeps its prefix: Foo would be another module */
    ELIXIR("Elixir.Elixir.Foo", "f", 0, "Elixir.Elixir.Foo.f/0");
}

static void test_anonymous_functions(void **state)
{
    (void)state;
    ELIXIR("Elixir.MyApp.Hot", "-spin/2-fun-0-", 1, "anonymous fn/1 in MyApp.Hot.spin/2");
    ELIXIR("Elixir.MyApp.Hot", "-spin/2-fun-12-", 0, "anonymous fn/0 in MyApp.Hot.spin/2");
    ELIXIR("Elixir.MyApp.Hot", "-spin/2-inlined-0-", 3, "anonymous fn/3 in MyApp.Hot.spin/2");
    ELIXIR("Elixir.MyApp.Hot", "-valid?/1-fun-0-", 1, "anonymous fn/1 in MyApp.Hot.valid?/1");
    /* a fun in a fun: Elixir names the outer fun's atom, quoted */
    ELIXIR("Elixir.MyApp.Hot", "--spin/2-fun-0-/1-fun-1-", 0,
           "anonymous fn/0 in MyApp.Hot.\"-spin/2-fun-0-\"/1");
    /* not "-NAME/ARITY-KIND-COUNT-": a plain function, quoted */
    ELIXIR("Elixir.MyApp.Hot", "-inlined-f/1-", 1, "MyApp.Hot.\"-inlined-f/1-\"/1");
    ELIXIR("Elixir.MyApp.Hot", "-spin/2-lc$^0/1-0-", 1, "MyApp.Hot.\"-spin/2-lc$^0/1-0-\"/1");
    ELIXIR("Elixir.MyApp.Hot", "-x", 1, "MyApp.Hot.\"-x\"/1");
    /* the parts are taken as text, as Elixir takes them */
    ELIXIR("Elixir.MyApp.Hot", "-f/-fun-0-", 1, "anonymous fn/1 in MyApp.Hot.f/");
    ELIXIR("Elixir.MyApp.Hot", "-1-fun-0-", 1, "anonymous fn/1 in MyApp.Hot.\"\"/1");
}

static void test_function_names_that_need_quotes(void **state)
{
    (void)state;
    ELIXIR("Elixir.MyApp.Hot", "foo bar", 0, "MyApp.Hot.\"foo bar\"/0");
    ELIXIR("Elixir.MyApp.Hot", "Foo", 0, "MyApp.Hot.\"Foo\"/0");
    ELIXIR("Elixir.MyApp.Hot", "foo@bar", 1, "MyApp.Hot.\"foo@bar\"/1");
    ELIXIR("Elixir.MyApp.Hot", "//", 2, "MyApp.Hot.\"//\"/2");
    ELIXIR("Elixir.MyApp.Hot", "->", 2, "MyApp.Hot.\"->\"/2");
    ELIXIR("Elixir.MyApp.Hot", "..", 2, "MyApp.Hot.\"..\"/2");
    ELIXIR("Elixir.MyApp.Hot", "", 0, "MyApp.Hot.\"\"/0");
    ELIXIR("Elixir.MyApp.Hot", "a\"b\\c#{d}\n", 1, "MyApp.Hot.\"a\\\"b\\\\c\\#{d}\\n\"/1");
    ELIXIR("Elixir.MyApp.Hot", "\x01\x7f", 1, "MyApp.Hot.\"\\x01\\d\"/1");
    /* operators are bare, the quoted ones too */
    ELIXIR("Elixir.MyApp.Hot", "+", 2, "MyApp.Hot.+/2");
    ELIXIR("Elixir.MyApp.Hot", "::", 2, "MyApp.Hot.::/2");
    ELIXIR("Elixir.MyApp.Hot", "<>", 2, "MyApp.Hot.<>/2");
    ELIXIR("Elixir.MyApp.Hot", "\\\\", 2, "MyApp.Hot.\\\\/2");
    /* Unicode identifiers are bare */
    ELIXIR("Elixir.MyApp.Hot", "ol\xc3\xa1", 1, "MyApp.Hot.ol\xc3\xa1/1");
}

static void test_odd_module_atoms(void **state)
{
    (void)state;
    /* "Elixir." but no alias: a quoted atom, as Elixir writes it */
    ELIXIR("Elixir.my_mod", "f", 0, ":\"Elixir.my_mod\".f/0");
    ELIXIR("Elixir.Foo.bar", "f", 0, ":\"Elixir.Foo.bar\".f/0");
    ELIXIR("Elixir.My Mod", "a->b", 0, ":\"Elixir.My Mod\".\"a->b\"/0");
    ELIXIR("Elixir.Foo.B\xc3\xa4r", "f", 0, ":\"Elixir.Foo.B\xc3\xa4r\".f/0");
    ELIXIR("Elixir.", "f", 0, ":\"Elixir.\".f/0");
    /* not Elixir modules at all */
    ELIXIR("Elixir", "f", 0, "Elixir:f/0");
    ELIXIR("ElixirFoo", "f", 0, "ElixirFoo:f/0");
    ELIXIR("elixir.Foo", "f", 0, "elixir.Foo:f/0");
}

static void test_erlang_modules_unchanged(void **state)
{
    (void)state;
    ELIXIR("lists", "seq", 2, "lists:seq/2");
    ELIXIR("gen_server", "call", 3, "gen_server:call/3");
    ELIXIR("erlang", "++", 2, "erlang:++/2");
    ELIXIR("my_mod", "-loop/1-fun-0-", 1, "my_mod:-loop/1-fun-0-/1");
    ELIXIR("elixir_compiler", "spawn", 1, "elixir_compiler:spawn/1");
}

static void test_erlang_notation(void **state)
{
    (void)state;
    check("Elixir.MyApp.Hot", "spin", 2, KP_NAMES_ERLANG, "Elixir.MyApp.Hot:spin/2");
    check("Elixir.MyApp.Hot", "-spin/2-fun-0-", 1, KP_NAMES_ERLANG,
          "Elixir.MyApp.Hot:-spin/2-fun-0-/1");
    check("Elixir.my_mod", "foo bar", 0, KP_NAMES_ERLANG, "Elixir.my_mod:foo bar/0");
    check("lists", "seq", 2, KP_NAMES_ERLANG, "lists:seq/2");
}

/* The name appends: what the buffer held stays; a failed allocation is
 * reported, never a crash. */
static void test_appends_and_out_of_memory(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "x;"), KP_OK);
    assert_int_equal(kp_frame_name(&b, "Elixir.A", 8, "f", 1, 1, KP_NAMES_ELIXIR), KP_OK);
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.data, "x;A.f/1", 7);
    kp_buf_free(&b);
    for (long n = 0;; n++) {
        kp_buf c = KP_BUF_INIT;
        kp_fault_alloc_after(n);
        kp_status st =
            kp_frame_name(&c, "Elixir.MyApp.Hot", 16, "-spin/2-fun-0-", 14, 1, KP_NAMES_ELIXIR);
        kp_fault_alloc_reset();
        kp_buf_free(&c);
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
    }
}

/* The module of a name, encoded (as files hold it) or not. */
static void check_label(int registered, const char *label, kp_names names, const char *expected)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_label_name(&b, registered, label, strlen(label), names), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, '\0'), KP_OK);
    assert_string_equal(b.data, expected);
    kp_buf_free(&b);
}

/* process labels as kprof_agent:process_label/1 sends them: a registered
 * name, or the initial call "M:F/A" */
static void test_process_labels(void **state)
{
    (void)state;
    check_label(1, "Elixir.MixShop.Store", KP_NAMES_ELIXIR, "MixShop.Store");
    check_label(1, "Elixir.MixShop.Store", KP_NAMES_ERLANG, "Elixir.MixShop.Store");
    check_label(1, "file_server_2", KP_NAMES_ELIXIR, "file_server_2");
    check_label(1, "Elixir.lower", KP_NAMES_ELIXIR, ":\"Elixir.lower\"");
    check_label(0, "Elixir.MixShop.Load:-start_link/1-fun-0-/0", KP_NAMES_ELIXIR,
                "anonymous fn/0 in MixShop.Load.start_link/1");
    check_label(0, "Elixir.MixShop.Load:loop/1", KP_NAMES_ELIXIR, "MixShop.Load.loop/1");
    check_label(0, "Elixir.MixShop.Load:loop/1", KP_NAMES_ERLANG, "Elixir.MixShop.Load:loop/1");
    check_label(0, "Elixir.M:'::'/2", KP_NAMES_ELIXIR, "M.\"'::'\"/2");
    check_label(0, "Elixir.M:::/2", KP_NAMES_ELIXIR, "M.::/2");
    check_label(0, "proc_lib:init_p/5", KP_NAMES_ELIXIR, "proc_lib:init_p/5");
    check_label(0, "unknown", KP_NAMES_ELIXIR, "unknown");
    /* not "M:F/A": copied as it is */
    check_label(0, "Elixir.M:f/x", KP_NAMES_ELIXIR, "Elixir.M:f/x");
    check_label(0, "Elixir.M:/1", KP_NAMES_ELIXIR, "Elixir.M:/1");
    check_label(0, "Elixir.M:f/", KP_NAMES_ELIXIR, "Elixir.M:f/");
    check_label(0, "Elixir.M", KP_NAMES_ELIXIR, "Elixir.M");
}

static void assert_module(const char *name, const char *expected)
{
    size_t start = 99, len = 99;
    int code = kp_frame_name_module(name, strlen(name), &start, &len);
    if (!expected) {
        assert_int_equal(code, 0);
        return;
    }
    assert_int_equal(code, 1);
    assert_int_equal(len, strlen(expected));
    assert_memory_equal(name + start, expected, len);
}

static void test_module_of_a_name(void **state)
{
    (void)state;
    assert_module("lists:seq/2", "lists");
    assert_module("lists:seq/2:17", "lists");
    assert_module("erlang:%2B%2B/2", "erlang");
    assert_module("MyApp.Hot.spin/2", "MyApp.Hot");
    assert_module("MyApp.Hot.spin/2:8", "MyApp.Hot");
    assert_module("anonymous fn/1 in MyApp.Hot.spin/2", "MyApp.Hot");
    assert_module("anonymous%20fn/1%20in%20MyApp.Hot.spin/2", "MyApp.Hot");
    assert_module("MyApp.Hot.%22-inlined-f/1-%22/1", "MyApp.Hot");
    assert_module(":\"Elixir.my_mod\".f/0", ":\"Elixir.my_mod\"");
    assert_module("Elixir.MyApp.Hot:spin/2", "Elixir.MyApp.Hot");
    assert_module("sleep", NULL);
    assert_module("<0.85.0>", NULL);
    assert_module("[vm]process_main", NULL);
    assert_module("running", NULL);
    assert_module("f/2", NULL);
    assert_module("/2", NULL);
    assert_module("x:1", NULL);
    assert_module("", NULL);
}

/* Elixir names go through the symbol encoding whole, and come back. */
static void test_encoded_round_trip(void **state)
{
    (void)state;
    kp_buf name = KP_BUF_INIT, enc = KP_BUF_INIT, dec = KP_BUF_INIT;
    assert_int_equal(
        kp_frame_name(&name, "Elixir.MyApp.Hot", 16, "-spin/2-fun-0-", 14, 1, KP_NAMES_ELIXIR),
        KP_OK);
    assert_int_equal(kp_symbol_encode(&enc, name.data, name.len), KP_OK);
    static const char encoded[] = "anonymous%20fn/1%20in%20MyApp.Hot.spin/2";
    assert_int_equal(enc.len, sizeof encoded - 1);
    assert_memory_equal(enc.data, encoded, enc.len);
    assert_int_equal(kp_symbol_decode(&dec, enc.data, enc.len), KP_OK);
    assert_int_equal(dec.len, name.len);
    assert_memory_equal(dec.data, name.data, name.len);
    kp_buf_free(&name);
    kp_buf_free(&enc);
    kp_buf_free(&dec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elixir_modules),
        cmocka_unit_test(test_anonymous_functions),
        cmocka_unit_test(test_function_names_that_need_quotes),
        cmocka_unit_test(test_odd_module_atoms),
        cmocka_unit_test(test_erlang_modules_unchanged),
        cmocka_unit_test(test_erlang_notation),
        cmocka_unit_test(test_appends_and_out_of_memory),
        cmocka_unit_test(test_module_of_a_name),
        cmocka_unit_test(test_encoded_round_trip),
        cmocka_unit_test(test_process_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
