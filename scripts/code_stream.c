/*
 * Where a block of kernel-like straight-line code comes from after user data went through
 * the caches, and what refetching it costs: the evidence for two cache properties of a
 * core that `kharden kernel evict-fault` cannot separate (docs/design/memory.md
 * section 2).
 *
 *   gcc -O2 -o code_stream scripts/code_stream.c
 *   for L in 128 256; do for E in 0 256 4096 65536; do ./code_stream $L $E 0; done;
 *     ./code_stream $L 0 1; done
 *
 * A block of LINES 64-byte lines of 4-byte NOPs (then RET) is run twice, then
 *   mode 0: every line of an EVICT_KIB data buffer is read;
 *   mode 1: 64 KiB of other code is run instead (the block leaves L1I and the op cache
 *           by fetch, and stays in L2);
 * and the block's third run is timed with RDTSC (median of 200).
 * - mode 1 as fast as no eviction: sequential code served by L2 costs nothing extra.
 * - a data-only eviction of L2's size or more slowing the block: L2 evicted the code and
 *   took it out of L1I too (L2 inclusive of L1I); what it adds per line is what a
 *   sequential code line costs from the LLC (4 MiB) or DRAM (64 MiB).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static inline uint64_t rdtsc(void)
{
	unsigned lo, hi;
	__asm__ volatile("lfence; rdtsc; lfence" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

typedef void (*block_fn)(void);

static block_fn make_block(size_t lines)
{
	size_t len = lines * 64 + 64;
	unsigned char *p = mmap(0, len, PROT_READ | PROT_WRITE | PROT_EXEC,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("code_stream: mmap");
		exit(1);
	}
	for (size_t i = 0; i < lines * 64; i += 4) { /* nopl 0x0(%rax) */
		p[i] = 0x0f; p[i + 1] = 0x1f; p[i + 2] = 0x40; p[i + 3] = 0x00;
	}
	p[lines * 64] = 0xc3; /* ret */
	return (block_fn)p;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: code_stream LINES EVICT_KIB MODE(0|1)\n");
		return 2;
	}
	size_t lines = strtoul(argv[1], 0, 10), evict = strtoul(argv[2], 0, 10) * 1024;
	int mode = atoi(argv[3]), runs = 200;
	block_fn block = make_block(lines), other = make_block(1024);
	volatile char *buf = malloc(evict + 64);
	uint64_t *t = malloc(runs * sizeof *t);
	for (size_t j = 0; j < evict; j += 64)
		buf[j] = 1;
	for (int r = 0; r < runs; r++) {
		unsigned sum = 0;
		block();
		block();
		if (mode == 1)
			other();
		for (size_t j = 0; j < evict; j += 64)
			sum += buf[j];
		uint64_t t0 = rdtsc();
		block();
		t[r] = rdtsc() - t0;
		(void)sum;
	}
	qsort(t, runs, sizeof *t, cmp);
	printf("lines %zu evict %zu KiB mode %d: median %lu TSC cycles\n", lines, evict / 1024,
	       mode, (unsigned long)t[runs / 2]);
	return 0;
}
