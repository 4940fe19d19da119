/* kp_cookie_parse (sampler/node/connection.c): the cookie of a plain cookie
 * file (~/.erlang.cookie, a Mix release's releases/COOKIE) and of a
 * release's vm.args, as `--cookie-file` reads them, and the one-line errors
 * for files that hold no cookie kprof can use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "node/connection.h"

static char cookie[256], err[512];

static int parse(const char *text)
{
    cookie[0] = err[0] = '\0';
    return kp_cookie_parse(text, "F", cookie, sizeof cookie, err, sizeof err);
}

static void reads_a_cookie_file(void **state)
{
    (void)state;
    assert_int_equal(parse("ABCDEFGHIJKLMNOPQRST"), 0); /* as erl writes it: no newline */
    assert_string_equal(cookie, "ABCDEFGHIJKLMNOPQRST");
    assert_int_equal(parse("S3CR3T_cookie \r\n"), 0); /* as an editor leaves it */
    assert_string_equal(cookie, "S3CR3T_cookie");
}

/* relx's vm.args: comments, other flags, the cookie anywhere */
static void reads_the_setcookie_of_a_vm_args(void **state)
{
    (void)state;
    const char *vm_args = "## Name of the node\n"
                          "-name shop@127.0.0.1\n"
                          "\n"
                          "## Cookie for distributed erlang\n"
                          "-setcookie shop_cookie\n"
                          "+K true\n";
    assert_int_equal(parse(vm_args), 0);
    assert_string_equal(cookie, "shop_cookie");
    assert_int_equal(parse("-sname a\n  -setcookie 'quoted'  # why\n"), 0);
    assert_string_equal(cookie, "quoted");
    assert_int_equal(parse("-setcookie \"dq\""), 0);
    assert_string_equal(cookie, "dq");
}

static void names_the_cause_of_no_cookie(void **state)
{
    (void)state;
    assert_int_equal(parse(""), -1);
    assert_non_null(strstr(err, "F is empty"));
    assert_int_equal(parse("\n\n"), -1);
    assert_non_null(strstr(err, "empty"));
    /* a vm.args that leaves the cookie to the node's user */
    assert_int_equal(parse("-name shop@127.0.0.1\n+K true\n"), -1);
    assert_non_null(strstr(err, "without -setcookie"));
    /* relx fills ${COOKIE} from the environment at start */
    assert_int_equal(parse("-setcookie ${COOKIE}\n"), -1);
    assert_non_null(strstr(err, "KPROF_COOKIE"));
    assert_int_equal(parse("-setcookie\n"), -1);
    /* -setcookiex is another flag, not the cookie */
    assert_int_equal(parse("-setcookiex y\n-sname a\n"), -1);
    assert_non_null(strstr(err, "without -setcookie"));
    char big[400];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(parse(big), -1);
    assert_non_null(strstr(err, "longer than 255 bytes"));
    assert_string_equal(cookie, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_cookie_file),
        cmocka_unit_test(reads_the_setcookie_of_a_vm_args),
        cmocka_unit_test(names_the_cause_of_no_cookie),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
