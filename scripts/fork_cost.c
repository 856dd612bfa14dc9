/*
 * What fork() costs the parent against the anonymous memory it has touched: the evidence
 * for how much of the recorded fork latency is the recording driver's own size
 * (docs/design/footprints.md section 6).
 *
 *   gcc -O2 -o fork_cost scripts/fork_cost.c
 *   for MIB in 0 2 8 44 100; do ./fork_cost $MIB; done
 *
 * The parent first writes one byte per page of MIB MiB of heap, then 300 times forks 32
 * children that _exit at once, timing the 32 fork() calls, and reaps them. Prints the 10th
 * percentile and the median of the time per fork (the recorder's own batch shape).
 * File-backed text is not copied at fork (its VMAs have no anon_vma), so only the touched
 * anonymous pages' entries add to the copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 300
#define BATCH 32

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s MIB\n", argv[0]);
		return 2;
	}
	size_t bytes = (size_t)atol(argv[1]) << 20;
	volatile char *heap = bytes ? malloc(bytes) : NULL;
	for (size_t off = 0; off < bytes; off += 4096)
		heap[off] = 1;
	static double per_fork[ROUNDS];
	pid_t pids[BATCH];
	for (int r = 0; r < ROUNDS; r++) {
		double start = now_ns();
		for (int i = 0; i < BATCH; i++) {
			pids[i] = fork();
			if (pids[i] == 0)
				_exit(0);
			if (pids[i] < 0) {
				perror("fork");
				return 1;
			}
		}
		per_fork[r] = (now_ns() - start) / BATCH;
		for (int i = 0; i < BATCH; i++)
			waitpid(pids[i], NULL, 0);
	}
	qsort(per_fork, ROUNDS, sizeof(double), by_value);
	printf("%s MiB touched: fork p10 %.1f us, median %.1f us\n", argv[1],
	       per_fork[ROUNDS / 10] / 1e3, per_fork[ROUNDS / 2] / 1e3);
	return 0;
}
