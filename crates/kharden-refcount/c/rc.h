/*
 * kharden refcount implementations: the public interface shared by the Rust crate (FFI),
 * the native self-test and the arm64 self-test run under qemu-user.
 *
 * Every implementation follows the semantics of a Linux refcount_t variant:
 *   atomic_t    plain atomic_inc / atomic_dec_and_test (no checks; wraps)
 *   fast        "fast refcount checking": one locked/exclusive arithmetic instruction that
 *               sets the flags, then a branch to an out-of-line handler that saturates the
 *               counter at INT_MIN/2 and reports (x86-64: lock add + js; arm64: adds/subs +
 *               ccmp + b.le / b.mi, in LL/SC and LSE forms)
 *   full        CONFIG_REFCOUNT_FULL of v4.13 (lib/refcount.c): unsigned counter,
 *               compare-and-exchange loops, saturation at UINT_MAX
 *   fetch_add   the generic implementation of v5.5+: fetch_add/fetch_sub, then checks on the
 *               old value; saturation at REFCOUNT_SATURATED = INT_MIN/2
 * Written for kharden; no kernel code is copied.
 */
#ifndef KHARDEN_RC_H
#define KHARDEN_RC_H

#include <stdbool.h>

typedef struct { int counter; } rc_t;

/* What an implementation reports (the kernel's WARN/refcount_error_report cases). */
enum rc_warn {
	RC_W_OVERFLOW = 0,	/* counter crossed INT_MAX (fast) or reached its saturation value */
	RC_W_INC_ZERO,		/* increment/addition on 0: use-after-free */
	RC_W_UNDERFLOW,		/* decrement below 0 / on a saturated counter: use-after-free */
	RC_W_HIT_ZERO,		/* refcount_dec() (no test) reached 0: leaking memory */
	RC_W_UNEXPECTED,	/* x86 fast handler entered with none of OF, ZF, SF */
	RC_W_KINDS
};

enum rc_kind { RC_ATOMIC = 0, RC_FAST = 1, RC_FULL = 2, RC_FETCH_ADD = 3 };

struct rc_impl {
	const char *name;	/* "atomic_t", "fast", "full", "fetch_add" */
	const char *variant;	/* "x86-64", "arm64-llsc", "arm64-lse" */
	int kind;		/* enum rc_kind */
	int saturated;		/* the value a saturated counter holds (0 for atomic_t: none) */
	void (*set)(rc_t *r, int v);
	int (*read)(const rc_t *r);
	void (*inc)(rc_t *r);
	void (*add)(int i, rc_t *r);
	bool (*inc_not_zero)(rc_t *r);
	void (*dec)(rc_t *r);
	bool (*dec_and_test)(rc_t *r);
	bool (*sub_and_test)(int i, rc_t *r);
	/* LKDTM's loop: n-1 increments from 1, then decrement-and-test back; returns the
	 * loop index at which dec_and_test reported zero (1 when in sync). */
	unsigned (*timing)(unsigned n);
	/* Contended: n increments then n dec_and_test on a shared counter; returns how many
	 * dec_and_test calls reported zero. */
	unsigned long (*contended)(rc_t *r, unsigned n);
};

/* Warnings raised by the calling thread since the last reset (thread-local). */
unsigned long rc_warnings(int kind);
void rc_reset_warnings(void);
void rc_report(int kind);

/* Every implementation compiled for this target (LSE ones only on arm64). */
const struct rc_impl *rc_impls(unsigned *n);

/* Runs the functional tests over every implementation in `impls`; prints one line per
 * failure to stderr and a summary to stdout; returns the number of failures. */
int rc_selftest(const struct rc_impl *impls, unsigned n, int threads, unsigned per_thread);

#endif
