/* kp_strtab: dense stable ids, exact lookups, no merging of distinct keys,
 * memory that follows distinct keys only, and allocation failures that leave
 * the table unchanged. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/strtab.h"

static int reset_faults(void **state)
{
    (void)state;
    kp_fault_alloc_reset();
    return 0;
}

static uint32_t intern_ok(kp_strtab *t, const void *key, size_t len, int *is_new)
{
    uint32_t id = UINT32_MAX;
    assert_int_equal(kp_strtab_intern(t, key, len, &id, is_new), KP_OK);
    return id;
}

/* The stored bytes of `id` are exactly `key`. */
static void assert_stored(const kp_strtab *t, uint32_t id, const void *key, size_t len)
{
    size_t got_len = SIZE_MAX;
    const void *got = kp_strtab_get(t, id, &got_len);
    assert_int_equal(got_len, len);
    if (len)
        assert_memory_equal(got, key, len);
    assert_int_equal((uintptr_t)got % 4, 0); /* documented 4-byte alignment */
}

static int found_id(const kp_strtab *t, const void *key, size_t len, uint32_t *id)
{
    return kp_strtab_find(t, key, len, kp_strtab_hash(key, len), id);
}

static void test_ids_dense_and_stable(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    assert_int_equal(kp_strtab_count(t), 0);

    const char *words[] = {"a;b", "b", "c", "a;b;c", "ab"};
    int is_new = -1;
    for (uint32_t i = 0; i < 5; i++) {
        assert_int_equal(intern_ok(t, words[i], strlen(words[i]), &is_new), i);
        assert_int_equal(is_new, 1);
        assert_int_equal(kp_strtab_count(t), i + 1);
    }
    /* again, in another order: same ids, nothing new */
    for (uint32_t i = 5; i-- > 0;) {
        assert_int_equal(intern_ok(t, words[i], strlen(words[i]), &is_new), i);
        assert_int_equal(is_new, 0);
    }
    assert_int_equal(kp_strtab_count(t), 5);
    for (uint32_t i = 0; i < 5; i++)
        assert_stored(t, i, words[i], strlen(words[i]));

    /* the precomputed-hash entry point agrees with the plain one */
    uint32_t id;
    assert_int_equal(kp_strtab_intern_hashed(t, "c", 1, kp_strtab_hash("c", 1), &id, NULL), KP_OK);
    assert_int_equal(id, 2);
    assert_int_equal(kp_strtab_intern_hashed(t, "new", 3, kp_strtab_hash("new", 3), &id, &is_new),
                     KP_OK);
    assert_int_equal(id, 5);
    assert_int_equal(is_new, 1);
    kp_strtab_free(t);
    kp_strtab_free(NULL);
}

static void test_find(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    uint32_t id = 77;
    assert_false(found_id(t, "x", 1, &id));
    assert_false(found_id(t, "", 0, &id));
    assert_int_equal(id, 77); /* untouched when absent */
    intern_ok(t, "x", 1, NULL);
    intern_ok(t, "yy", 2, NULL);
    assert_true(found_id(t, "yy", 2, &id));
    assert_int_equal(id, 1);
    assert_true(found_id(t, "x", 1, &id));
    assert_int_equal(id, 0);
    assert_false(found_id(t, "y", 1, &id));   /* prefix of a key */
    assert_false(found_id(t, "yyy", 3, &id)); /* extension of a key */
    assert_int_equal(kp_strtab_count(t), 2);  /* find never adds */

    /* find never allocates: it works with every allocation failing */
    kp_fault_alloc_after(0);
    assert_true(found_id(t, "yy", 2, &id));
    assert_false(found_id(t, "zz", 2, &id));
    assert_int_equal(kp_fault_alloc_attempts(), 0);
    kp_fault_alloc_reset();
    kp_strtab_free(t);
}

static void test_empty_and_binary_keys(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    static const char nul1[] = {0}, nul2[] = {0, 0}, anb[] = {'a', 0, 'b'}, anc[] = {'a', 0, 'c'};
    struct {
        const void *key;
        size_t len;
    } keys[] = {{"", 0}, {nul1, 1}, {nul2, 2}, {"a", 1}, {anb, 3}, {anc, 3}, {"\xff\xfe", 2}};
    size_t n = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(intern_ok(t, keys[i].key, keys[i].len, NULL), i);
    assert_int_equal(kp_strtab_count(t), n);
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        assert_int_equal(intern_ok(t, keys[i].key, keys[i].len, NULL), i);
        assert_true(found_id(t, keys[i].key, keys[i].len, &id));
        assert_int_equal(id, i);
        assert_stored(t, (uint32_t)i, keys[i].key, keys[i].len);
    }
    kp_strtab_free(t);
}

/* 200k keys: counters, keys differing in a single byte (every position, every
 * value), and keys that are prefixes of one another. None may be merged. */
#define N_COUNTER 180000u
#define ONE_BYTE_LEN 24u

static size_t make_key(uint32_t i, unsigned char *buf)
{
    if (i < N_COUNTER)
        return (size_t)snprintf((char *)buf, 32, "mod_%u:fun/%u", i, i % 7);
    i -= N_COUNTER;
    if (i < ONE_BYTE_LEN * 255) { /* 'x' * 24 with one byte changed */
        memset(buf, 'x', ONE_BYTE_LEN);
        unsigned v = i % 255;
        buf[i / 255] = (unsigned char)(v < 'x' ? v : v + 1);
        return ONE_BYTE_LEN;
    }
    i -= ONE_BYTE_LEN * 255;
    memset(buf, 'x', i); /* "", "x", "xx", ...: prefixes of one another */
    return i;
}

static void test_many_keys_never_merged(void **state)
{
    (void)state;
    const uint32_t n = N_COUNTER + ONE_BYTE_LEN * 255 + 200; /* 186320 + prefixes */
    unsigned char key[256];
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    int is_new;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = make_key(i, key);
        assert_int_equal(intern_ok(t, key, len, &is_new), i);
        assert_int_equal(is_new, 1);
    }
    assert_int_equal(kp_strtab_count(t), n);
    /* after all the growth: every id still maps to its key, and back */
    for (uint32_t i = 0; i < n; i++) {
        size_t len = make_key(i, key);
        uint32_t id;
        assert_true(found_id(t, key, len, &id));
        assert_int_equal(id, i);
        assert_int_equal(intern_ok(t, key, len, &is_new), i);
        assert_int_equal(is_new, 0);
        assert_stored(t, i, key, len);
    }
    assert_int_equal(kp_strtab_count(t), n);
    kp_strtab_free(t);
}

static void test_large_keys(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    size_t big = 1u << 20; /* larger than any initial arena */
    unsigned char *a = malloc(big), *b = malloc(big);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < big; i++)
        a[i] = b[i] = (unsigned char)(i * 31 + 7);
    b[big - 1] ^= 1; /* differs in the last byte only */
    assert_int_equal(intern_ok(t, "small", 5, NULL), 0);
    assert_int_equal(intern_ok(t, a, big, NULL), 1);
    assert_int_equal(intern_ok(t, b, big, NULL), 2);
    assert_int_equal(intern_ok(t, a, big - 1, NULL), 3); /* a prefix */
    assert_int_equal(intern_ok(t, b, big - 1, NULL), 3); /* the same prefix */
    assert_stored(t, 0, "small", 5);
    assert_stored(t, 1, a, big);
    assert_stored(t, 2, b, big);
    free(a);
    free(b);
    kp_strtab_free(t);
}

static void test_key_of_4gib_is_refused(void **state)
{
    (void)state;
    /* a readable 4 GiB range of zero pages; nothing is committed */
    size_t len = (size_t)UINT32_MAX + 1;
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        skip();
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    uint32_t id;
    assert_int_equal(kp_strtab_intern(t, p, len, &id, NULL), KP_ERR_LIMIT);
    assert_int_equal(kp_strtab_count(t), 0);
    munmap(p, len);
    kp_strtab_free(t);
}

static void test_memory_follows_distinct_keys(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    char key[32];
    size_t empty = kp_strtab_memory(t);
    assert_true(empty > 0);
    for (int i = 0; i < 1000; i++)
        intern_ok(t, key, (size_t)snprintf(key, sizeof key, "frame-%d", i), NULL);
    size_t after_1000 = kp_strtab_memory(t);
    assert_true(after_1000 > empty);
    /* a million more lookups of the same keys: not one byte more */
    for (int round = 0; round < 1000; round++)
        for (int i = 0; i < 1000; i++)
            intern_ok(t, key, (size_t)snprintf(key, sizeof key, "frame-%d", i), NULL);
    assert_int_equal(kp_strtab_memory(t), after_1000);
    assert_int_equal(kp_strtab_count(t), 1000);
    /* and 100x the distinct keys: at least 10x the memory, and not absurdly more */
    for (int i = 1000; i < 100000; i++)
        intern_ok(t, key, (size_t)snprintf(key, sizeof key, "frame-%d", i), NULL);
    size_t after_100k = kp_strtab_memory(t);
    assert_true(after_100k >= 10 * after_1000);
    assert_true(after_100k < 100000 * 100); /* well under 100 bytes per short key */
    kp_strtab_free(t);
}

static void test_create_out_of_memory(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        kp_fault_alloc_after(n);
        kp_strtab *t = kp_strtab_create();
        kp_fault_alloc_reset();
        if (t) {
            assert_int_equal(kp_strtab_count(t), 0);
            kp_strtab_free(t);
            break;
        }
        assert_true(n < 100);
    }
}

/* Every key added under a failing allocator: each failure returns
 * KP_ERR_NOMEM and leaves the table exactly as it was (same count, same ids,
 * new key absent); with memory back, the same call succeeds. 300 keys of
 * growing size cross every growth point (entries, hash slots, arena). */
static void test_intern_out_of_memory(void **state)
{
    (void)state;
    kp_strtab *t = kp_strtab_create();
    assert_non_null(t);
    char key[512];
    size_t failures = 0;
    for (uint32_t i = 0; i < 300; i++) {
        size_t len = (size_t)snprintf(key, sizeof key, "%0*u", (int)(i % 200) + 1, i);
        for (long n = 0;; n++) {
            uint32_t id = 12345;
            int is_new = -1;
            kp_fault_alloc_after(n);
            kp_status st = kp_strtab_intern(t, key, len, &id, &is_new);
            kp_fault_alloc_reset();
            if (st == KP_OK) {
                assert_int_equal(id, i);
                assert_int_equal(is_new, 1);
                break;
            }
            failures++;
            assert_int_equal(st, KP_ERR_NOMEM);
            assert_int_equal(kp_strtab_count(t), i);
            assert_false(found_id(t, key, len, &id));
            /* every earlier key: same id, same bytes */
            char old[512];
            for (uint32_t j = 0; j < i; j++) {
                size_t old_len = (size_t)snprintf(old, sizeof old, "%0*u", (int)(j % 200) + 1, j);
                assert_true(found_id(t, old, old_len, &id));
                assert_int_equal(id, j);
                assert_stored(t, j, old, old_len);
            }
            assert_true(n < 10);
        }
    }
    assert_true(failures > 3); /* the growth points were really crossed */
    kp_strtab_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_ids_dense_and_stable, reset_faults),
        cmocka_unit_test_teardown(test_find, reset_faults),
        cmocka_unit_test_teardown(test_empty_and_binary_keys, reset_faults),
        cmocka_unit_test_teardown(test_many_keys_never_merged, reset_faults),
        cmocka_unit_test_teardown(test_large_keys, reset_faults),
        cmocka_unit_test_teardown(test_key_of_4gib_is_refused, reset_faults),
        cmocka_unit_test_teardown(test_memory_follows_distinct_keys, reset_faults),
        cmocka_unit_test_teardown(test_create_out_of_memory, reset_faults),
        cmocka_unit_test_teardown(test_intern_out_of_memory, reset_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
