/*
 * What every variant shares: the warning counters (the kernel's WARN_ONCE /
 * refcount_error_report, counted per thread instead of printed) and the list of compiled
 * implementations.
 */
#include "rc.h"

static _Thread_local unsigned long rc_warn_counts[RC_W_KINDS];

void rc_report(int kind)
{
	if (kind >= 0 && kind < RC_W_KINDS)
		rc_warn_counts[kind]++;
}

unsigned long rc_warnings(int kind)
{
	return (kind >= 0 && kind < RC_W_KINDS) ? rc_warn_counts[kind] : 0;
}

void rc_reset_warnings(void)
{
	for (int k = 0; k < RC_W_KINDS; k++)
		rc_warn_counts[k] = 0;
}

#if defined(__x86_64__)
extern const struct rc_impl rc_x86_impls[4];
const struct rc_impl *rc_impls(unsigned *n)
{
	*n = 4;
	return rc_x86_impls;
}
#elif defined(__aarch64__)
extern const struct rc_impl rc_llsc_impls[4];
extern const struct rc_impl rc_lse_impls[4];
static struct rc_impl all[8];
const struct rc_impl *rc_impls(unsigned *n)
{
	for (int i = 0; i < 4; i++) {
		all[i] = rc_llsc_impls[i];
		all[4 + i] = rc_lse_impls[i];
	}
	*n = 8;
	return all;
}
#endif
