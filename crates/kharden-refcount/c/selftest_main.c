/* Stand-alone functional test (arm64 under qemu-user, or any host): all implementations. */
#include <stdio.h>
#include <stdlib.h>
#include "rc.h"

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	unsigned per_thread = argc > 2 ? (unsigned)atoi(argv[2]) : 100000;
	unsigned n;
	const struct rc_impl *impls = rc_impls(&n);
	return rc_selftest(impls, n, threads, per_thread) ? 1 : 0;
}
