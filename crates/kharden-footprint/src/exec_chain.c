/* The execve path's driver: a static program without libc that execs itself until the
 * counter in argv[1] (fixed-width decimal, decremented in place) reaches zero, so the
 * process runs nothing but execve and its own first page faults.
 *
 * Built with -DMARKER_BYTES=N for an emulator watching the driver (marker.rs): its .bss, the
 * marker region, is linked at the region's address, so every image of the chain has it
 * mapped by the ELF loader as part of its execve, and argv[2] and argv[3] (decimal
 * addresses) are the two markers each image loads first: the window's other path, then an
 * operation. One execve is then the kernel's work from one image's markers to the next's. */
static long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

#ifdef MARKER_BYTES
static char marker_region[MARKER_BYTES] __attribute__((used));

static unsigned long decimal(const char *s)
{
	unsigned long v = 0;

	while (*s >= '0' && *s <= '9')
		v = v * 10 + (unsigned long)(*s++ - '0');
	return v;
}

/* The marker encoding the plugin recognises: a one-byte load with a redundant DS prefix. */
static void mark(unsigned long addr)
{
	unsigned char c;

	__asm__ volatile(".byte 0x3e\n\tmovb (%1), %0" : "=q"(c) : "r"(addr) : "memory");
}
#endif

void chain(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	char *d = argv[1];
	int i = 0, zero = 1;

#ifdef MARKER_BYTES
	if (argc >= 4) {
		mark(decimal(argv[2]));
		mark(decimal(argv[3]));
	}
#endif
	while (d[i])
		i++;
	while (--i >= 0) {
		if (d[i] > '0') {
			d[i]--;
			break;
		}
		d[i] = '9';
	}
	for (i = 0; d[i]; i++)
		if (d[i] != '0')
			zero = 0;
	if (!zero)
		sys3(59 /* execve */, (long)argv[0], (long)argv, (long)envp);
	sys3(231 /* exit_group */, 0, 0, 0);
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall chain\n\thlt\n");
