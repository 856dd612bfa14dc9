/*
 * Per-architecture atomic primitives, shaped like the kernel's (v4.13-v5.x era):
 *   x86-64      lock-prefixed instructions
 *   arm64 LL/SC prfm pstl1strm + ldxr/stxr retry loops (ldaxr/stlxr and dmb ish where the
 *               kernel's ordering asks for them)
 *   arm64 LSE   single instructions (stadd, ldadd{,l,al}, cas{,l,al}); selected when the
 *               compiler targets ARMv8.1-A (__ARM_FEATURE_ATOMICS)
 * RC_PFX(x) names the variant's symbols so LL/SC and LSE objects link into one program.
 */
#ifndef KHARDEN_RC_ARCH_H
#define KHARDEN_RC_ARCH_H

#include "rc.h"

#define rc_always_inline inline __attribute__((always_inline))
#define rc_noinline __attribute__((noinline))
#define rc_cold __attribute__((noinline, cold))
#define rc_unlikely(x) __builtin_expect(!!(x), 0)
#define RC_INT_MAX 0x7fffffff
#define RC_INT_MIN (-RC_INT_MAX - 1)
#define RC_UINT_MAX 0xffffffffu
#define RC_SATURATED (RC_INT_MIN / 2)

static rc_always_inline int arch_read(const rc_t *r)
{
	return *(const volatile int *)&r->counter;
}

static rc_always_inline void arch_set(rc_t *r, int v)
{
	*(volatile int *)&r->counter = v;
}

#if defined(__x86_64__)

#define RC_PFX(x) rc_x86_##x
#define RC_VARIANT "x86-64"

/* Returns the value found; x86's locked cmpxchg is fully ordered in every flavour. */
static rc_always_inline int arch_cmpxchg(rc_t *r, int old, int new)
{
	int prev;
	asm volatile("lock cmpxchgl %[new], %[c]"
		     : "=a"(prev), [c] "+m"(r->counter)
		     : [new] "r"(new), "0"(old)
		     : "memory");
	return prev;
}
#define arch_cmpxchg_relaxed arch_cmpxchg
#define arch_cmpxchg_release arch_cmpxchg

static rc_always_inline int arch_fetch_add(int i, rc_t *r)
{
	asm volatile("lock xaddl %[i], %[c]" : [i] "+r"(i), [c] "+m"(r->counter) : : "memory");
	return i;
}
#define arch_fetch_add_relaxed arch_fetch_add
#define arch_fetch_sub_release(i, r) arch_fetch_add(-(i), (r))

#elif defined(__aarch64__) && !defined(__ARM_FEATURE_ATOMICS)

#define RC_PFX(x) rc_llsc_##x
#define RC_VARIANT "arm64-llsc"

/* LL/SC compare-and-exchange: ld{a}xr, compare, st{l}xr, retry; `mb` adds a trailing dmb. */
#define RC_LLSC_CMPXCHG(sfx, ld, st, mb, ...)					\
static rc_always_inline int arch_cmpxchg##sfx(rc_t *r, int old, int new)	\
{										\
	unsigned long tmp;							\
	int oldval;								\
	asm volatile(								\
	"	prfm	pstl1strm, %[c]\n"					\
	"1:	" ld "	%w[oldval], %[c]\n"					\
	"	eor	%w[tmp], %w[oldval], %w[old]\n"				\
	"	cbnz	%w[tmp], 2f\n"						\
	"	" st "	%w[tmp], %w[new], %[c]\n"				\
	"	cbnz	%w[tmp], 1b\n"						\
	"	" mb "\n"							\
	"2:"									\
	: [tmp] "=&r"(tmp), [oldval] "=&r"(oldval), [c] "+Q"(r->counter)	\
	: [old] "r"(old), [new] "r"(new)					\
	: __VA_ARGS__);								\
	return oldval;								\
}
RC_LLSC_CMPXCHG(_relaxed, "ldxr", "stxr", "", "cc")
RC_LLSC_CMPXCHG(_release, "ldxr", "stlxr", "", "cc", "memory")
RC_LLSC_CMPXCHG(, "ldxr", "stlxr", "dmb ish", "cc", "memory")

static rc_always_inline int arch_fetch_add_relaxed(int i, rc_t *r)
{
	unsigned long tmp;
	int result, val;
	asm volatile(
	"	prfm	pstl1strm, %[c]\n"
	"1:	ldxr	%w[res], %[c]\n"
	"	add	%w[val], %w[res], %w[i]\n"
	"	stxr	%w[tmp], %w[val], %[c]\n"
	"	cbnz	%w[tmp], 1b\n"
	: [res] "=&r"(result), [val] "=&r"(val), [tmp] "=&r"(tmp), [c] "+Q"(r->counter)
	: [i] "Ir"(i));
	return result;
}

static rc_always_inline int arch_fetch_sub_release(int i, rc_t *r)
{
	unsigned long tmp;
	int result, val;
	asm volatile(
	"	prfm	pstl1strm, %[c]\n"
	"1:	ldxr	%w[res], %[c]\n"
	"	sub	%w[val], %w[res], %w[i]\n"
	"	stlxr	%w[tmp], %w[val], %[c]\n"
	"	cbnz	%w[tmp], 1b\n"
	: [res] "=&r"(result), [val] "=&r"(val), [tmp] "=&r"(tmp), [c] "+Q"(r->counter)
	: [i] "Ir"(i)
	: "memory");
	return result;
}

#elif defined(__aarch64__) && defined(__ARM_FEATURE_ATOMICS)

#define RC_PFX(x) rc_lse_##x
#define RC_VARIANT "arm64-lse"

#define RC_LSE_CMPXCHG(sfx, insn, ...)						\
static rc_always_inline int arch_cmpxchg##sfx(rc_t *r, int old, int new)	\
{										\
	int cur = old;								\
	asm volatile(insn "	%w[cur], %w[new], %[c]"				\
	: [cur] "+&r"(cur), [c] "+Q"(r->counter)				\
	: [new] "r"(new)							\
	: __VA_ARGS__);								\
	return cur;								\
}
RC_LSE_CMPXCHG(_relaxed, "cas")
RC_LSE_CMPXCHG(_release, "casl", "memory")
RC_LSE_CMPXCHG(, "casal", "memory")

static rc_always_inline int arch_fetch_add_relaxed(int i, rc_t *r)
{
	int old;
	asm volatile("ldadd	%w[i], %w[old], %[c]"
		     : [old] "=r"(old), [c] "+Q"(r->counter) : [i] "r"(i));
	return old;
}

static rc_always_inline int arch_fetch_sub_release(int i, rc_t *r)
{
	int old;
	asm volatile("ldaddl	%w[i], %w[old], %[c]"
		     : [old] "=r"(old), [c] "+Q"(r->counter) : [i] "r"(-i) : "memory");
	return old;
}

#else
#error "kharden-refcount: unsupported architecture (x86-64 and arm64 only)"
#endif

#endif
