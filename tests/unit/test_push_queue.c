/* kprof push's queue and retry delays (sampler/push/queue.c): FIFO order,
 * the oldest dropped when full by count or bytes and counted, a window put
 * back at the head, and backoff bounds, jitter and Retry-After. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "push/queue.h"

static kp_push_window window(uint64_t id, size_t len)
{
    kp_push_window w = {malloc(len ? len : 1), len, id, id + 1};
    assert_non_null(w.data);
    memset(w.data, (int)id, len);
    return w;
}

static uint64_t take_id(kp_push_queue *q)
{
    kp_push_window w;
    assert_int_equal(kp_push_queue_take(q, &w), 1);
    uint64_t id = w.start_ns;
    free(w.data);
    return id;
}

static void fifo_and_count_bound(void **state)
{
    (void)state;
    kp_push_queue q;
    assert_int_equal(kp_push_queue_init(&q, 3, 1000), 0);
    for (uint64_t i = 1; i <= 3; i++) {
        kp_push_window w = window(i, 10);
        assert_int_equal(kp_push_queue_put(&q, &w), 0);
        assert_null(w.data);
    }
    kp_push_window w = window(4, 10);
    assert_int_equal(kp_push_queue_put(&q, &w), 1);
    assert_int_equal(q.count, 3);
    assert_int_equal(q.bytes, 30);
    assert_int_equal(q.dropped, 1);
    assert_int_equal(take_id(&q), 2);
    assert_int_equal(take_id(&q), 3);
    assert_int_equal(take_id(&q), 4);
    kp_push_window none;
    assert_int_equal(kp_push_queue_take(&q, &none), 0);
    assert_int_equal(q.bytes, 0);
    /* around the ring many times: nothing grows */
    for (uint64_t i = 10; i < 1000; i++) {
        kp_push_window x = window(i, 5);
        kp_push_queue_put(&q, &x);
    }
    assert_int_equal(q.count, 3);
    assert_int_equal(q.dropped, 1 + 990 - 3);
    assert_int_equal(take_id(&q), 997);
    kp_push_queue_free(&q);
    kp_push_queue_free(&q);
}

static void byte_bound(void **state)
{
    (void)state;
    kp_push_queue q;
    assert_int_equal(kp_push_queue_init(&q, 10, 100), 0);
    for (uint64_t i = 1; i <= 4; i++) {
        kp_push_window w = window(i, 25);
        assert_int_equal(kp_push_queue_put(&q, &w), 0);
    }
    /* 60 bytes more: the three oldest go */
    kp_push_window big = window(5, 60);
    assert_int_equal(kp_push_queue_put(&q, &big), 3);
    assert_int_equal(q.count, 2);
    assert_int_equal(q.bytes, 85);
    assert_int_equal(q.dropped, 3);
    /* larger than the whole queue: dropped itself, the rest kept */
    kp_push_window huge = window(6, 101);
    assert_int_equal(kp_push_queue_put(&q, &huge), 1);
    assert_null(huge.data);
    assert_int_equal(q.count, 2);
    assert_int_equal(q.dropped, 4);
    assert_int_equal(take_id(&q), 4);
    kp_push_queue_free(&q); /* frees window 5 */
}

static void put_front(void **state)
{
    (void)state;
    kp_push_queue q;
    assert_int_equal(kp_push_queue_init(&q, 2, 100), 0);
    kp_push_window a = window(1, 10), b = window(2, 10), c = window(3, 10);
    kp_push_queue_put(&q, &a);
    kp_push_queue_put(&q, &b);
    kp_push_window head;
    assert_int_equal(kp_push_queue_take(&q, &head), 1);      /* being sent */
    kp_push_queue_put(&q, &c);                               /* full again */
    assert_int_equal(kp_push_queue_put_front(&q, &head), 1); /* the oldest: dropped */
    assert_int_equal(q.dropped, 1);
    assert_int_equal(kp_push_queue_take(&q, &head), 1);
    assert_int_equal(head.start_ns, 2);
    assert_int_equal(kp_push_queue_put_front(&q, &head), 0);
    assert_int_equal(take_id(&q), 2);
    assert_int_equal(take_id(&q), 3);
    kp_push_queue_free(&q);
}

static void backoff(void **state)
{
    (void)state;
    uint64_t rng = 42;
    /* exponential from min, jittered within [base/2, base], capped */
    uint64_t base = 1000;
    for (unsigned n = 1; n <= 20; n++) {
        for (int k = 0; k < 50; k++) {
            uint64_t d = kp_push_backoff_ms(n, 1000, 300000, -1, &rng);
            assert_true(d >= (base + 1) / 2 && d <= base);
        }
        base = base * 2 > 300000 ? 300000 : base * 2;
    }
    /* huge failure counts do not overflow */
    assert_true(kp_push_backoff_ms(100000, 1000, 300000, -1, &rng) <= 300000);
    assert_true(kp_push_backoff_ms(70, UINT64_MAX / 4, UINT64_MAX / 2, -1, &rng) <= UINT64_MAX / 2);
    /* the jitter varies */
    uint64_t first = kp_push_backoff_ms(5, 1000, 300000, -1, &rng);
    int differs = 0;
    for (int k = 0; k < 20; k++)
        differs |= kp_push_backoff_ms(5, 1000, 300000, -1, &rng) != first;
    assert_true(differs);
    /* deterministic from the seed */
    uint64_t r1 = 7, r2 = 7;
    for (int k = 0; k < 10; k++)
        assert_int_equal(kp_push_backoff_ms(3, 1000, 300000, -1, &r1),
                         kp_push_backoff_ms(3, 1000, 300000, -1, &r2));
    /* Retry-After wins when longer, capped at 10 minutes; not when shorter */
    assert_int_equal(kp_push_backoff_ms(1, 1000, 300000, 30000, &rng), 30000);
    assert_int_equal(kp_push_backoff_ms(1, 1000, 300000, 3600000, &rng), 600000);
    uint64_t d = kp_push_backoff_ms(10, 1000, 300000, 0, &rng);
    assert_true(d >= 150000 && d <= 300000);
    /* degenerate limits */
    assert_true(kp_push_backoff_ms(1, 0, 0, -1, &rng) <= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fifo_and_count_bound),
        cmocka_unit_test(byte_bound),
        cmocka_unit_test(put_front),
        cmocka_unit_test(backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
