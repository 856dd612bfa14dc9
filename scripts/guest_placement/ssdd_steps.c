// The system calls of one rt-tests ssdd run (tracer/tracee pairs, PTRACE_ATTACH, then a
// loop of PTRACE_SINGLESTEP and waitpid with a SIGCHLD handler), written for kharden's
// placement measurement: what matters here is which kernel objects the run allocates, not
// ssdd's checks. Usage: ssdd_steps PAIRS STEPS [HOLD]
// HOLD children that pause() are forked first: they take the kernel stacks exited tasks left
// in the per-CPU stack cache, so the pairs' stacks are fresh allocations the trace sees.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t sigchld_seen;

static void on_sigchld(int sig) { (void)sig; sigchld_seen = 1; }

/* The guest-physical frame behind one of our own addresses (/proc/self/pagemap, as root). */
static void print_frame(const char *what, const void *addr)
{
	uint64_t entry = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);
	if (fd >= 0 && pread(fd, &entry, 8, (uintptr_t)addr / 4096 * 8) == 8 && (entry >> 63))
		printf("placement-user: pid=%d %s pfn=0x%llx\n", getpid(), what,
		       (unsigned long long)(entry & ((1ULL << 55) - 1)));
	if (fd >= 0)
		close(fd);
}

static pid_t wait_any(int *status)
{
	pid_t pid;
	while ((pid = waitpid(-1, status, WUNTRACED | __WALL)) == -1)
		;
	return pid;
}

static void tracer(long steps)
{
	pid_t child = fork();
	if (child == 0)
		for (;;)
			;
	struct sigaction act = { .sa_handler = on_sigchld };
	sigaction(SIGCHLD, &act, NULL);
	int status;
	if (ptrace(PTRACE_ATTACH, child, NULL, NULL) != 0 || wait_any(&status) != child)
		_exit(1);
	for (long i = 0; i < steps; i++) {
		if (ptrace(PTRACE_SINGLESTEP, child, NULL, NULL) != 0)
			_exit(1);
		if (wait_any(&status) != child || !WIFSTOPPED(status))
			_exit(1);
		sigchld_seen = 0;
		if (i == 0) {
			volatile char on_stack = 0;
			print_frame("text", (const void *)tracer);
			print_frame("data", (const void *)&sigchld_seen);
			print_frame("stack", (const void *)&on_stack);
			print_frame("libc_data", (const void *)&errno);
			/* libc's wrappers the step runs; the signal restorer sits with sigaction. */
			print_frame("libc_text", (const void *)waitpid);
			print_frame("libc_text", (const void *)ptrace);
			print_frame("libc_text", (const void *)sigaction);
			print_frame("libc_text", (const void *)kill);
		}
	}
	kill(child, SIGKILL);
	_exit(0);
}

int main(int argc, char **argv)
{
	setbuf(stdout, NULL);
	long pairs = argc > 1 ? atol(argv[1]) : 10, steps = argc > 2 ? atol(argv[2]) : 10000;
	long hold = argc > 3 ? atol(argv[3]) : 0;
	pid_t held[8];
	for (long h = 0; h < hold && h < 8; h++)
		if ((held[h] = fork()) == 0)
			for (;;)
				pause();
	printf("placement-run: hold=%ld\n", hold);
	for (long p = 0; p < pairs; p++)
		if (fork() == 0)
			tracer(steps);
	int status, failed = 0;
	for (long p = 0; p < pairs; p++)
		failed |= wait_any(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status);
	for (long h = 0; h < hold && h < 8; h++)
		kill(held[h], SIGKILL);
	printf("ssdd_steps: %ld pairs x %ld steps: %s\n", pairs, steps, failed ? "FAILED" : "ok");
	return failed;
}
