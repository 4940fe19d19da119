/* kp_node_rpc (sampler/node/connection.c) against a real node: a message
 * that reaches kprof before a call's reply (another node's part of a
 * request trace, a collector's clock) goes to node->on_message, or is
 * dropped, and is never taken for the reply. erlang:send(OurPid, Msg) makes
 * one such message on demand: the node sends it before it replies. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/connection.h"

static pid_t erl_pid;
static kp_node node;
static char seen[16][300]; /* the messages on_message got, as text */
static int n_seen;

static void on_message(void *ctx, const char *msg, int len)
{
    (void)ctx;
    int i = 0, version, arity;
    char tag[MAXATOMLEN];
    long no;
    assert_true(n_seen < 16);
    if (ei_decode_version(msg, &i, &version) == 0 && ei_decode_tuple_header(msg, &i, &arity) == 0 &&
        arity == 2 && ei_decode_atom(msg, &i, tag) == 0 && ei_decode_long(msg, &i, &no) == 0 &&
        i == len)
        snprintf(seen[n_seen], sizeof seen[n_seen], "{%s,%ld}", tag, no);
    else
        snprintf(seen[n_seen], sizeof seen[n_seen], "?");
    n_seen++;
}

/* erlang:send(OurPid, {Tag, No}): the node's reply is the message again */
static void send_to_self(const char *tag, long no)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_pid(&args, &node.self);
    ei_x_encode_tuple_header(&args, 2);
    ei_x_encode_atom(&args, tag);
    ei_x_encode_long(&args, no);
    ei_x_encode_empty_list(&args);
    assert_int_equal(kp_node_rpc(&node, "erlang", "send", &args, &reply), 0);
    int i = 0, arity;
    char got[MAXATOMLEN];
    long got_no;
    assert_int_equal(ei_decode_tuple_header(reply.buff, &i, &arity), 0);
    assert_int_equal(arity, 2);
    assert_int_equal(ei_decode_atom(reply.buff, &i, got), 0);
    assert_string_equal(got, tag);
    assert_int_equal(ei_decode_long(reply.buff, &i, &got_no), 0);
    assert_int_equal(got_no, no);
    assert_int_equal(i, reply.index); /* the reply alone: no version, no rex */
    ei_x_free(&args);
    ei_x_free(&reply);
}

/* erlang:node() answers the node's name: the call after a stray message
 * gets its own reply, not one left over */
static void node_answers_its_name(void)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_empty_list(&args);
    assert_int_equal(kp_node_rpc(&node, "erlang", "node", &args, &reply), 0);
    int i = 0;
    char name[MAXATOMLEN_UTF8];
    assert_int_equal(ei_decode_atom(reply.buff, &i, name), 0);
    assert_string_equal(name, node.target);
    ei_x_free(&args);
    ei_x_free(&reply);
}

static void a_message_before_the_reply_goes_to_on_message(void **state)
{
    (void)state;
    node.on_message = on_message;
    n_seen = 0;
    send_to_self("part", 1);
    send_to_self("part", 2);
    assert_int_equal(n_seen, 2);
    assert_string_equal(seen[0], "{part,1}");
    assert_string_equal(seen[1], "{part,2}");
    node_answers_its_name();
    assert_int_equal(n_seen, 2);
}

static void without_on_message_it_is_dropped(void **state)
{
    (void)state;
    node.on_message = NULL;
    n_seen = 0;
    send_to_self("clock", 7);
    node_answers_its_name();
    assert_int_equal(n_seen, 0);
}

/* Starts epmd and a node of a fresh name with a fresh cookie, and connects
 * to it (retrying while it starts). */
static int start_node(void **state)
{
    (void)state;
    char name[64], target[512], cookie[64], err[512];
    snprintf(name, sizeof name, "kpt_rpc_%ld", (long)getpid());
    snprintf(cookie, sizeof cookie, "KPTRPC%ld%ld", (long)getpid(), (long)time(NULL));
    if (system("epmd -daemon >/dev/null 2>&1") != 0)
        return -1;
    erl_pid = fork();
    if (erl_pid < 0)
        return -1;
    if (erl_pid == 0) {
        freopen("/dev/null", "r", stdin);
        execlp("erl", "erl", "-noshell", "-sname", name, "-setcookie", cookie, (char *)NULL);
        _exit(127);
    }
    if (kp_node_name(name, target, sizeof target, err, sizeof err) != 0)
        return -1;
    for (int tries = 0; tries < 300; tries++) { /* 30 s: a loaded host */
        if (kp_node_connect(&node, target, cookie, 1000, err, sizeof err) == 0)
            return 0;
        usleep(100000);
    }
    fprintf(stderr, "test node %s: %s\n", target, err);
    return -1;
}

static int stop_node(void **state)
{
    (void)state;
    kp_node_close(&node);
    if (erl_pid > 0) {
        kill(erl_pid, SIGKILL);
        waitpid(erl_pid, NULL, 0);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_message_before_the_reply_goes_to_on_message),
        cmocka_unit_test(without_on_message_it_is_dropped),
    };
    return cmocka_run_group_tests(tests, start_node, stop_node);
}
