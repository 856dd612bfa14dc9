/*
 * mitigation_cost.c - what one return through SRSO's Safe RET thunk and one indirect call
 * through a retpoline cost on this core, beside a plain RET and a plain indirect call
 * (issue 53 item 6; docs/design/footprints.md section 5).
 *
 * Linux on AMD Zen with spec_rstack_overflow=safe-ret replaces every kernel RET by a jump to
 * srso_alias_return_thunk, which CALLs srso_alias_safe_ret, drops that return address
 * (LEA 8(%rsp), %rsp) and RETs to the real caller. With spectre_v2=retpoline every indirect
 * call goes through __x86_indirect_thunk_REG, which CALLs past a PAUSE/LFENCE trap, stores
 * the target over its return address and RETs to it. The same sequences are written here in
 * user mode (the kernel's own cannot be switched off on a running host) and timed in a chain
 * of 16 nested calls, each returning one way or the other, and a loop of 16 indirect calls
 * to a function that returns at once; then the chains again with ten instructions of work
 * before each call. TSC cycles per return or call: median and p10/p90 over
 * batches, the configurations alternated. Then the host kernel's own: an empty syscall
 * (number 1000, -ENOSYS), getpid and getppid, TSC cycles per call, whose differences hold the
 * returns the two add (docs/design/footprints.md section 5).
 *
 * Build and run:  gcc -O2 -o mc scripts/mitigation_cost.c && ./mc 301
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
#include <sys/syscall.h>

#define DEPTH 16
#define BATCH 64

/* Nested chains: plain_0 calls plain_1 ... plain_15, each returns with RET; safe_* the same
 * returning through the Safe RET thunk. Indirect calls: plain and through the retpoline. */
__asm__(
    ".text\n"
    ".p2align 6\n"
    "mc_safe_ret:\n"           /* srso_alias_safe_ret */
    "  lea 8(%rsp), %rsp\n"
    "  ret\n"
    "  int3\n"
    ".p2align 6\n"
    "mc_return_thunk:\n"       /* srso_alias_return_thunk */
    "  call mc_safe_ret\n"
    "  ud2\n"
    ".p2align 6\n"
    "mc_retpoline_rax:\n"      /* __x86_indirect_thunk_rax */
    "  call 1f\n"
    "2: pause\n"
    "  lfence\n"
    "  jmp 2b\n"
    "1: mov %rax, (%rsp)\n"
    "  ret\n"
    ".p2align 6\n"
    "mc_leaf:\n"
    "  ret\n");
__asm__(
    ".macro chain2 name, ret_insn\n"
    "  .p2align 4\n"
    "  .globl \\name\\()_0\n"
    "  \\name\\()_0: call \\name\\()_1\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_1: call \\name\\()_2\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_2: call \\name\\()_3\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_3: call \\name\\()_4\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_4: call \\name\\()_5\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_5: call \\name\\()_6\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_6: call \\name\\()_7\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_7: call \\name\\()_8\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_8: call \\name\\()_9\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_9: call \\name\\()_10\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_10: call \\name\\()_11\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_11: call \\name\\()_12\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_12: call \\name\\()_13\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_13: call \\name\\()_14\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_14: call \\name\\()_15\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_15: \\ret_insn\n"
    ".endm\n"
    "chain2 plain, ret\n"
    "chain2 safe, \"jmp mc_return_thunk\"\n"
    /* Ten instructions of loads, stores, a multiply and a branch before each call (%rdi
     * points at 48 bytes of scratch), as kernel code does between its calls. */
    ".macro work\n"
    "  mov (%rdi), %rax\n  add 8(%rdi), %rax\n  mov %rax, 16(%rdi)\n  mov 24(%rdi), %rcx\n"
    "  imul %rcx, %rax\n  mov %rax, 32(%rdi)\n  test %rax, %rax\n  jz 9f\n  add $1, %rcx\n"
    "9: mov %rcx, 40(%rdi)\n"
    ".endm\n"
    ".macro chainw name, ret_insn\n"
    "  .globl \\name\\()_0\n"
    "  .p2align 4\n \\name\\()_0: work\n call \\name\\()_1\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_1: work\n call \\name\\()_2\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_2: work\n call \\name\\()_3\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_3: work\n call \\name\\()_4\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_4: work\n call \\name\\()_5\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_5: work\n call \\name\\()_6\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_6: work\n call \\name\\()_7\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_7: work\n call \\name\\()_8\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_8: work\n call \\name\\()_9\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_9: work\n call \\name\\()_10\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_10: work\n call \\name\\()_11\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_11: work\n call \\name\\()_12\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_12: work\n call \\name\\()_13\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_13: work\n call \\name\\()_14\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_14: work\n call \\name\\()_15\n \\ret_insn\n"
    "  .p2align 4\n \\name\\()_15: work\n \\ret_insn\n"
    ".endm\n"
    "chainw plainw, ret\n"
    "chainw safew, \"jmp mc_return_thunk\"\n"
    /* void indirect_plain(void): 16 indirect calls to mc_leaf */
    ".p2align 6\n"
    ".globl indirect_plain\n"
    "indirect_plain:\n"
    "  push %rbx\n"
    "  lea mc_leaf(%rip), %rbx\n"
    "  .rept 16\n"
    "  mov %rbx, %rax\n"
    "  call *%rax\n"
    "  .endr\n"
    "  pop %rbx\n"
    "  ret\n"
    ".p2align 6\n"
    ".globl indirect_retpoline\n"
    "indirect_retpoline:\n"
    "  push %rbx\n"
    "  lea mc_leaf(%rip), %rbx\n"
    "  .rept 16\n"
    "  mov %rbx, %rax\n"
    "  call mc_retpoline_rax\n"
    "  .endr\n"
    "  pop %rbx\n"
    "  ret\n");

void plain_0(void);
void safe_0(void);
void indirect_plain(void);
void indirect_retpoline(void);
void plainw_0(long *scratch);
void safew_0(long *scratch);

static inline uint64_t tsc(void)
{
    unsigned a;
    uint64_t t = __rdtscp(&a);
    _mm_lfence();
    return t;
}

static inline long raw_syscall(long nr)
{
    long r = nr;
    __asm__ volatile("syscall" : "+a"(r) : : "rcx", "r11", "memory");
    return r;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 201;
    void (*run[4])(void) = {plain_0, safe_0, indirect_plain, indirect_retpoline};
    const char *name[4] = {"ret", "safe-ret thunk", "indirect call", "retpoline call"};
    double *m[4];
    for (int k = 0; k < 4; k++)
        m[k] = malloc(batches * sizeof(double));
    for (int b = 0; b < batches; b++)
        for (int k = 0; k < 4; k++) {
            uint64_t t = tsc();
            for (int i = 0; i < BATCH; i++)
                run[k]();
            /* per return (16 + the call into the chain) or per indirect call (16) */
            m[k][b] = (double)(tsc() - t) / BATCH / DEPTH;
        }
    for (int k = 0; k < 4; k++) {
        qsort(m[k], batches, sizeof(double), cmp);
        printf("%-16s median %.2f p10 %.2f p90 %.2f TSC cycles each\n", name[k],
               m[k][batches / 2], m[k][batches / 10], m[k][9 * batches / 10]);
    }
    printf("safe-ret adds %.2f per return, retpoline %.2f per indirect call (medians)\n",
           m[1][batches / 2] - m[0][batches / 2], m[3][batches / 2] - m[2][batches / 2]);
    long scratch[6] = {1, 2, 3, 4, 5, 6};
    for (int b = 0; b < batches; b++)
        for (int k = 0; k < 2; k++) {
            uint64_t t = tsc();
            for (int i = 0; i < BATCH; i++)
                (k ? safew_0 : plainw_0)(scratch);
            m[k][b] = (double)(tsc() - t) / BATCH / DEPTH;
        }
    for (int k = 0; k < 2; k++)
        qsort(m[k], batches, sizeof(double), cmp);
    printf("with work around each call: ret %.2f, safe-ret thunk %.2f: safe-ret adds %.2f\n",
           m[0][batches / 2], m[1][batches / 2], m[1][batches / 2] - m[0][batches / 2]);
    long nr[3] = {1000, SYS_getpid, SYS_getppid};
    const char *sys_name[3] = {"empty syscall", "getpid", "getppid"};
    for (int b = 0; b < batches; b++)
        for (int k = 0; k < 3; k++) {
            uint64_t t = tsc();
            for (int i = 0; i < 256; i++)
                raw_syscall(nr[k]);
            m[k][b] = (double)(tsc() - t) / 256;
        }
    for (int k = 0; k < 3; k++) {
        qsort(m[k], batches, sizeof(double), cmp);
        printf("%-16s median %.1f p10 %.1f TSC cycles per call\n", sys_name[k],
               m[k][batches / 2], m[k][batches / 10]);
    }
    return 0;
}
