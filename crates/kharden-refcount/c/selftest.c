/*
 * Functional tests of every refcount implementation, in C so the same tests run natively
 * (called from the Rust test suite) and on arm64 under qemu-user (selftest_main.c).
 * Expectations follow the kernel's behaviour per implementation, including its gaps:
 * atomic_t wraps silently; x86's fast refcount does not catch an increment from zero and
 * saturates silently when a counter goes below zero without crossing a boundary flag.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "rc.h"

#define SAT (INT_MIN / 2)

static int failures;

#define CHECK(im, cond, ...) do {						\
	if (!(cond)) {								\
		failures++;							\
		fprintf(stderr, "FAIL %s/%s line %d: ", (im)->name, (im)->variant, __LINE__); \
		fprintf(stderr, __VA_ARGS__);					\
		fprintf(stderr, "\n");						\
	}									\
} while (0)

static bool is_x86(const struct rc_impl *im) { return strcmp(im->variant, "x86-64") == 0; }

/* The value a checked implementation leaves after catching a bad operation. */
static int caught_value(const struct rc_impl *im, int full_value)
{
	return im->kind == RC_FULL ? full_value : SAT;
}

static void test_dec_and_test_once(const struct rc_impl *im)
{
	rc_t r;
	im->set(&r, 3);
	rc_reset_warnings();
	int zeros = 0;
	for (int k = 0; k < 3; k++)
		zeros += im->dec_and_test(&r);
	CHECK(im, zeros == 1, "dec_and_test from 3 reported zero %d times, expected once", zeros);
	CHECK(im, im->read(&r) == 0, "counter %d after three decrements from 3", im->read(&r));
	/* use after free: decrementing a counter that already reached zero */
	bool z = im->dec_and_test(&r);
	CHECK(im, !z, "dec_and_test on 0 reported zero again");
	int v = im->read(&r);
	switch (im->kind) {
	case RC_ATOMIC:
		CHECK(im, v == -1, "atomic_t should wrap to -1, got %d", v);
		break;
	case RC_FULL:
		CHECK(im, v == 0, "REFCOUNT_FULL should refuse the underflow and stay at 0, got %d", v);
		CHECK(im, rc_warnings(RC_W_UNDERFLOW) == 1, "expected one underflow warning, got %lu", rc_warnings(RC_W_UNDERFLOW));
		break;
	default:
		CHECK(im, v == SAT, "expected saturation at INT_MIN/2, got %d", v);
		if (im->kind == RC_FAST && is_x86(im))
			CHECK(im, rc_warnings(RC_W_UNDERFLOW) == 0, "x86 fast refcount saturates 0->-1 silently (SF only), got a warning");
		else
			CHECK(im, rc_warnings(RC_W_UNDERFLOW) == 1, "expected one underflow warning, got %lu", rc_warnings(RC_W_UNDERFLOW));
	}
	for (int k = 0; k < 5; k++)
		CHECK(im, !im->dec_and_test(&r) || im->kind == RC_ATOMIC, "dec_and_test reported zero on a freed counter");
	if (im->kind != RC_ATOMIC)
		CHECK(im, im->read(&r) == caught_value(im, 0), "counter moved after use-after-free decrements: %d", im->read(&r));
}

static void test_overflow(const struct rc_impl *im)
{
	rc_t r;
	rc_reset_warnings();
	if (im->kind == RC_ATOMIC) {
		im->set(&r, INT_MAX);
		im->inc(&r);
		CHECK(im, im->read(&r) == INT_MIN, "atomic_t should wrap INT_MAX+1 to INT_MIN, got %d", im->read(&r));
		CHECK(im, rc_warnings(RC_W_OVERFLOW) == 0, "atomic_t warned");
		return;
	}
	int top = im->kind == RC_FULL ? (int)(UINT_MAX - 1) : INT_MAX;
	int sat = im->kind == RC_FULL ? (int)UINT_MAX : SAT;
	im->set(&r, top);
	im->inc(&r);
	CHECK(im, im->read(&r) == sat, "increment past the top: expected saturation %d, got %d", sat, im->read(&r));
	CHECK(im, rc_warnings(RC_W_OVERFLOW) == 1, "expected one overflow warning, got %lu", rc_warnings(RC_W_OVERFLOW));
	/* saturated stays saturated, whatever happens next */
	for (int k = 0; k < 100; k++) {
		im->inc(&r);
		im->add(7, &r);
		bool z = im->dec_and_test(&r);
		CHECK(im, !z, "dec_and_test on a saturated counter reported zero");
		im->dec(&r);
		CHECK(im, im->inc_not_zero(&r), "inc_not_zero on a saturated counter failed");
		CHECK(im, !im->sub_and_test(3, &r), "sub_and_test on a saturated counter reported zero");
	}
	CHECK(im, im->read(&r) == sat, "saturated counter moved to %d", im->read(&r));
	if (im->kind == RC_FAST && is_x86(im))
		CHECK(im, rc_warnings(RC_W_OVERFLOW) == 1, "x86 reports only the boundary crossing, got %lu", rc_warnings(RC_W_OVERFLOW));

	/* add crossing the top, and inc_not_zero at the top */
	im->set(&r, top - 2);
	im->add(5, &r);
	CHECK(im, im->read(&r) == sat, "add past the top: expected %d, got %d", sat, im->read(&r));
	im->set(&r, top);
	CHECK(im, im->inc_not_zero(&r), "inc_not_zero at the top returned false");
	CHECK(im, im->read(&r) == sat, "inc_not_zero past the top: expected %d, got %d", sat, im->read(&r));
}

static void test_inc_from_zero(const struct rc_impl *im)
{
	rc_t r;
	im->set(&r, 0);
	rc_reset_warnings();
	CHECK(im, !im->inc_not_zero(&r), "inc_not_zero on 0 returned true");
	CHECK(im, im->read(&r) == 0, "inc_not_zero on 0 changed the counter to %d", im->read(&r));
	im->inc(&r);
	int v = im->read(&r);
	bool uncaught = im->kind == RC_ATOMIC || (im->kind == RC_FAST && is_x86(im));
	if (uncaught) {
		CHECK(im, v == 1 && rc_warnings(RC_W_INC_ZERO) == 0,
		      "expected the increment from 0 to go unnoticed (kernel behaviour), got %d", v);
	} else {
		CHECK(im, v == caught_value(im, 0), "increment from 0: expected %d, got %d", caught_value(im, 0), v);
		CHECK(im, rc_warnings(RC_W_INC_ZERO) == 1, "expected one increment-on-0 warning, got %lu", rc_warnings(RC_W_INC_ZERO));
	}
	im->set(&r, 0);
	rc_reset_warnings();
	im->add(2, &r);
	v = im->read(&r);
	if (uncaught)
		CHECK(im, v == 2, "add on 0 should go unnoticed, got %d", v);
	else
		CHECK(im, v == caught_value(im, 0) && rc_warnings(RC_W_INC_ZERO) == 1,
		      "add on 0: expected %d with one warning, got %d / %lu", caught_value(im, 0), v, rc_warnings(RC_W_INC_ZERO));
}

static void test_dec_to_zero(const struct rc_impl *im)
{
	rc_t r;
	im->set(&r, 2);
	rc_reset_warnings();
	im->dec(&r);
	CHECK(im, im->read(&r) == 1 && rc_warnings(RC_W_HIT_ZERO) == 0, "dec from 2: got %d", im->read(&r));
	im->dec(&r);
	int v = im->read(&r);
	if (im->kind == RC_ATOMIC) {
		CHECK(im, v == 0, "atomic_dec to 0: got %d", v);
	} else {
		CHECK(im, v == caught_value(im, 0), "refcount_dec hitting 0: expected %d, got %d", caught_value(im, 0), v);
		CHECK(im, rc_warnings(RC_W_HIT_ZERO) == 1, "expected one hit-zero warning, got %lu", rc_warnings(RC_W_HIT_ZERO));
	}
}

struct worker { const struct rc_impl *im; rc_t *r; unsigned n; int phase; unsigned long zeros; };

static void *work(void *p)
{
	struct worker *w = p;
	if (w->phase == 0)
		for (unsigned k = 0; k < w->n; k++)
			w->im->inc(w->r);
	else if (w->phase == 1)
		w->zeros = w->im->contended(w->r, w->n);
	else
		for (unsigned k = 0; k < w->n; k++)
			w->zeros += w->im->dec_and_test(w->r);
	return NULL;
}

static unsigned long run_phase(const struct rc_impl *im, rc_t *r, int threads, unsigned n, int phase)
{
	pthread_t tid[64];
	struct worker w[64];
	unsigned long zeros = 0;
	for (int t = 0; t < threads; t++) {
		w[t] = (struct worker){ im, r, n, phase, 0 };
		pthread_create(&tid[t], NULL, work, &w[t]);
	}
	for (int t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		zeros += w[t].zeros;
	}
	return zeros;
}

static void test_concurrent(const struct rc_impl *im, int threads, unsigned n)
{
	rc_t r;
	im->set(&r, 1);
	run_phase(im, &r, threads, n, 0);
	long expect = 1 + (long)threads * n;
	CHECK(im, im->read(&r) == expect, "%d threads x %u increments: counter %d, expected %ld", threads, n, im->read(&r), expect);
	unsigned long z = run_phase(im, &r, threads, n, 1);
	CHECK(im, im->read(&r) == expect && z == 0, "contended inc/dec: counter %d (expected %ld), %lu zeros", im->read(&r), expect, z);
	z = run_phase(im, &r, threads, n, 2);
	CHECK(im, im->read(&r) == 1 && z == 0, "concurrent decrements: counter %d (expected 1), %lu zeros", im->read(&r), z);
	CHECK(im, im->dec_and_test(&r), "the last reference did not report zero");
}

static void test_timing_loop(const struct rc_impl *im)
{
	unsigned i = im->timing(1000);
	CHECK(im, i == 1, "LKDTM loop out of sync: %u", i);
}

int rc_selftest(const struct rc_impl *impls, unsigned n, int threads, unsigned per_thread)
{
	failures = 0;
	if (threads > 64)
		threads = 64;
	for (unsigned k = 0; k < n; k++) {
		const struct rc_impl *im = &impls[k];
		int before = failures;
		test_dec_and_test_once(im);
		test_overflow(im);
		test_inc_from_zero(im);
		test_dec_to_zero(im);
		test_concurrent(im, threads, per_thread);
		test_timing_loop(im);
		printf("%-10s %-11s %s\n", im->name, im->variant, failures == before ? "ok" : "FAILED");
	}
	printf("refcount selftest: %d failure(s)\n", failures);
	fflush(stdout);
	return failures;
}
