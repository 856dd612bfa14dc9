/* Driver for the instruction traces the arm64 cost model is built from: runs one LKDTM
 * loop (implementation index into rc_impls(), or -1/-2 for the empty loop: LL/SC / LSE on arm64, x86-64 for both). */
#include <stdlib.h>
#include "rc.h"

#if defined(__aarch64__)
unsigned rc_llsc_timing_empty(unsigned n);
unsigned rc_lse_timing_empty(unsigned n);
#define EMPTY_A rc_llsc_timing_empty
#define EMPTY_B rc_lse_timing_empty
#else
unsigned rc_x86_timing_empty(unsigned n);
#define EMPTY_A rc_x86_timing_empty
#define EMPTY_B rc_x86_timing_empty
#endif

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	int k = atoi(argv[1]);
	unsigned n = (unsigned)strtoul(argv[2], NULL, 10);
	unsigned count;
	const struct rc_impl *impls = rc_impls(&count);
	if (k == -1)
		return EMPTY_A(n) > 1;
	if (k == -2)
		return EMPTY_B(n) > 1;
	if (k < 0 || (unsigned)k >= count)
		return 2;
	return impls[k].timing(n) == 1 ? 0 : 1;
}
