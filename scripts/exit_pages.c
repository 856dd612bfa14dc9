/*
 * What an exit costs against the private anonymous memory the exiting process touched:
 * the evidence for the per-page teardown exit_mmap does (unmap, rmap and memcg uncharge,
 * freeing each page), which a compile job's cc1 pays for every page it touched.
 *
 *   gcc -O2 -o exit_pages scripts/exit_pages.c
 *   perf record -a -q -e raw_syscalls:sys_enter --filter 'id == 231' -e sched:sched_switch \
 *       -o exit.data -- ./exit_pages MIB
 *   perf script -i exit.data -F tid,time,event,trace --ns | python3 scripts/exit_latency.py
 *
 * 200 times, one child at a time: the child writes one byte per page of MIB MiB of fresh
 * heap, then exits (exit_group); the parent reaps it before forking the next. The exit's
 * time against MIB gives the teardown per page (exit_latency.py: entry to last switch, and
 * the part on a CPU).
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 200

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	size_t bytes = (size_t)atol(argv[1]) << 20;
	for (int i = 0; i < ROUNDS; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			if (bytes) {
				char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (p == MAP_FAILED)
					_exit(1);
				for (size_t o = 0; o < bytes; o += 4096)
					p[o] = 1;
			}
			_exit(0);
		}
		waitpid(pid, NULL, 0);
	}
	return 0;
}
