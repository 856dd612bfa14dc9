/*
 * What an anonymous page fault costs on this host by where its page comes from: the
 * evidence that a recording host which is itself a VM charges faults on memory its
 * hypervisor has not backed yet (docs/design/footprints.md section 6).
 *
 *   gcc -O2 -o first_touch_faults scripts/first_touch_faults.c
 *   ./first_touch_faults 16 5; ./first_touch_faults 8192 2; ./first_touch_faults 16 3
 *
 * Each pass maps MIB MiB of private anonymous memory (no huge pages), writes one byte per
 * 4 KiB page and unmaps it; it prints the mean time per fault. Passes over a small region
 * get back pages the previous pass freed (hot in the page allocator, backed by the host).
 * The first pass over a region larger than what the guest has touched since it booted, or
 * than what it handed back to the host (virtio-balloon free page reporting), faults on
 * guest memory the host must back first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s MIB PASSES\n", argv[0]);
		return 2;
	}
	size_t bytes = (size_t)atol(argv[1]) << 20;
	int passes = atoi(argv[2]);
	for (int pass = 0; pass < passes; pass++) {
		volatile char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		madvise((void *)p, bytes, MADV_NOHUGEPAGE);
		double start = now_ns();
		for (size_t off = 0; off < bytes; off += 4096)
			p[off] = 1;
		double per_fault = (now_ns() - start) / (double)(bytes / 4096);
		printf("%s MiB, pass %d: %.0f ns per fault\n", argv[1], pass, per_fault);
		munmap((void *)p, bytes);
	}
	return 0;
}
