// Times, natively, the three kernel operations kharden derives from recorded paths
// (crates/kharden/src/kernel/footprints/derived.rs) beside the paths they are derived from, so that the
// derived latency ratios can be checked against real ones:
//   fault-zero / fault-anon: a read of a fresh anonymous page / a write of one
//   fstat / newfstatat:      newfstatat(fd, "", AT_EMPTY_PATH) / stat of a path
//   vfork / fork:            vfork + _exit + wait / fork + _exit + wait of a small parent
// Each figure is the 10th percentile over ROUNDS timed windows (the host is shared).
//   cc -O2 -o /tmp/derived_paths_check scripts/derived_paths_check.c && /tmp/derived_paths_check
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 200
#define PAGES 4096
#define CALLS 2000
#define CHILDREN 20

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double p10(double *v) {
    qsort(v, ROUNDS, sizeof *v, cmp);
    return v[ROUNDS / 10];
}

// ns per fault over a fresh mapping, every page written (anonymous) or read (zero page).
static double fault(int write) {
    double v[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        volatile char *p = mmap(NULL, PAGES * 4096L, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        double t = now_ns();
        for (long i = 0; i < PAGES; i++) {
            if (write)
                p[i * 4096] = 1;
            else
                (void)p[i * 4096];
        }
        v[r] = (now_ns() - t) / PAGES;
        munmap((void *)p, PAGES * 4096L);
    }
    return p10(v);
}

// ns per newfstatat: of a path (empty = 0) or of a descriptor with AT_EMPTY_PATH.
static double stat_ns(int empty, const char *path, int fd) {
    double v[ROUNDS];
    struct stat st;
    for (int r = 0; r < ROUNDS; r++) {
        double t = now_ns();
        for (int i = 0; i < CALLS; i++) {
            int e = empty ? fstatat(fd, "", &st, AT_EMPTY_PATH)
                          : fstatat(AT_FDCWD, path, &st, 0);
            if (e) {
                perror("fstatat");
                exit(1);
            }
        }
        v[r] = (now_ns() - t) / CALLS;
    }
    return p10(v);
}

// ns per child started, exited and reaped, by fork or vfork.
static double spawn_ns(int use_vfork) {
    double v[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t = now_ns();
        for (int i = 0; i < CHILDREN; i++) {
            pid_t pid = use_vfork ? vfork() : fork();
            if (pid == 0)
                _exit(0);
            if (pid < 0) {
                perror("fork");
                exit(1);
            }
            waitpid(pid, NULL, 0);
        }
        v[r] = (now_ns() - t) / CHILDREN;
    }
    return p10(v);
}

int main(void) {
    const char *path = "/usr/include/stdio.h";
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    double anon = fault(1), zero = fault(0);
    double stat_path = stat_ns(0, path, fd), stat_fd = stat_ns(1, path, fd);
    double fork_ns = spawn_ns(0), vfork_ns = spawn_ns(1);
    printf("operation            ns p10   ratio\n");
    printf("fault-anon         %8.0f\n", anon);
    printf("fault-zero         %8.0f   %.2f of fault-anon\n", zero, zero / anon);
    printf("newfstatat (path)  %8.0f\n", stat_path);
    printf("fstat (empty path) %8.0f   %.2f of newfstatat\n", stat_fd, stat_fd / stat_path);
    printf("fork+exit+wait     %8.0f\n", fork_ns);
    printf("vfork+exit+wait    %8.0f   %.2f of fork\n", vfork_ns, vfork_ns / fork_ns);
    return 0;
}
