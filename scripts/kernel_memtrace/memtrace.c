/*
 * memtrace: a QEMU TCG plugin that records which 64-byte lines kernel code reads and writes
 * inside the driver's windows (scripts/kernel_memtrace/run.sh).
 *
 * The driver marks each window with a DS-prefixed one-byte load from an address that names it
 * (crates/kharden-footprint/src/marker.rs); the page fault such a load may take first is charged
 * to no window (a forked child's markers fault). Every kernel instruction's data access on that
 * vCPU, until the next marker, is counted against the window: per (window, line) the reads, the
 * writes and the operations that touched it (the driver's loops mark each operation with a load
 * from the tick slot, or from byte 1 of the window's slot, which opens the window too).
 * Instruction fetches are not counted (the text side is recorded already).
 * It also counts, per window, the kernel instructions that the speculation mitigations act on
 * (docs/design/mitigations.md): near returns, indirect calls and jumps, direct calls, LFENCEs
 * and SWAPGS (two per entry from user mode and return to it).
 * At exit the counts go to the file named by the plugin's `out` argument, one line each:
 *     WINDOW LINE_ADDRESS_HEX READS WRITES OPERATIONS
 *     T WINDOW TICKS
 *     I WINDOW RET CALL_INDIRECT JMP_INDIRECT CALL_DIRECT LFENCE SWAPGS
 * where WINDOW is the marker slot (1 + scenario * 65536 + window) and TICKS the operations
 * marked in it (none: the window's loop marks none, and OPERATIONS says nothing).
 * With the argument `lines=off` no data access is counted (the instruction counts alone run
 * several times faster).
 *
 * Written against QEMU's plugin API version 1 (QEMU 7.2, Debian 12), whose few declarations
 * are given below so that no QEMU headers are needed:
 *     cc -O2 -shared -fPIC -o memtrace.so memtrace.c
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plugin API (include/qemu/qemu-plugin.h of QEMU 7.2). */
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_RW = 3 };
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*mem_cb)(unsigned int, qemu_plugin_meminfo_t, uint64_t, void *);
typedef void (*udata_cb)(qemu_plugin_id_t, void *);
typedef void (*vcpu_udata_cb)(unsigned int, void *);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *, mem_cb, enum qemu_plugin_cb_flags,
                                      enum qemu_plugin_mem_rw, void *);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *, vcpu_udata_cb,
                                            enum qemu_plugin_cb_flags, void *);
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, udata_cb, void *);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* The marker region (marker.rs): BASE + 64 * slot. */
#define MARKER_BASE 0x3e0000000000ull
#define MARKER_SLOTS (1ull + 32 * 65536)
#define TICK_SLOT MARKER_SLOTS
#define KERNEL_HALF 0xffff800000000000ull
#define MAX_VCPUS 64

/* The instruction classes counted per window (classify()). */
enum insn_class { RET, CALL_INDIRECT, JMP_INDIRECT, CALL_DIRECT, LFENCE, SWAPGS, CLASSES, NONE };

struct entry {
    uint64_t key; /* window << 42 | (line address bits 6..47); 0 = empty */
    uint64_t reads, writes;
    uint32_t last_op; /* the window's operation number + 1 when it last touched the line */
    uint32_t ops;     /* operations that touched it */
};

/* One table per vCPU: callbacks of different vCPUs run on different threads (MTTCG). */
struct vcpu {
    uint64_t window;
    /* Between a marker instruction's start and its load: the page fault a marker's first
     * load of a page takes (a forked child's first marker) is charged to no window. */
    bool in_marker;
    /* Per window slot, the operations ticked in it on this vCPU: a window's own operation
     * number, so that a child marking its own window's operations on this vCPU in between
     * does not split the driver's. */
    uint32_t *ticks;
    struct entry *table;
    size_t cap, used;
    /* Per window slot, the kernel instructions of each class run in it on this vCPU. */
    uint64_t (*insns)[CLASSES];
};

static struct vcpu vcpus[MAX_VCPUS];
static char *out_path;
static bool count_lines = true;

static uint64_t key_of(uint64_t window, uint64_t vaddr)
{
    /* Kernel addresses are canonical: bits 48..63 are all ones, so 42 bits of line suffice. */
    return window << 42 | ((vaddr >> 6) & ((1ull << 42) - 1));
}

static struct entry *slot_for(struct entry *t, size_t cap, uint64_t key)
{
    size_t i = (key * 0x9e3779b97f4a7c15ull) >> 20 & (cap - 1);
    while (t[i].key && t[i].key != key)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static void grow(struct vcpu *v)
{
    size_t cap = v->cap ? v->cap * 2 : 1 << 16;
    struct entry *t = calloc(cap, sizeof *t);
    if (!t) {
        fprintf(stderr, "memtrace: out of memory at %zu entries\n", v->used);
        abort();
    }
    for (size_t i = 0; i < v->cap; i++)
        if (v->table[i].key)
            *slot_for(t, cap, v->table[i].key) = v->table[i];
    free(v->table);
    v->table = t;
    v->cap = cap;
}

static void kernel_access(unsigned int cpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *u)
{
    struct vcpu *v = &vcpus[cpu % MAX_VCPUS];
    if (!v->window || v->in_marker)
        return;
    if (2 * (v->used + 1) > v->cap)
        grow(v);
    uint64_t key = key_of(v->window, vaddr);
    struct entry *e = slot_for(v->table, v->cap, key);
    if (!e->key) {
        e->key = key;
        v->used++;
    }
    uint32_t op = v->ticks ? v->ticks[v->window] : 0;
    if (e->last_op != op + 1) {
        e->last_op = op + 1;
        e->ops++;
    }
    if (qemu_plugin_mem_is_store(info))
        e->writes++;
    else
        e->reads++;
}

static void marker_start(unsigned int cpu, void *u)
{
    vcpus[cpu % MAX_VCPUS].in_marker = true;
}

static void marker(unsigned int cpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *u)
{
    struct vcpu *v = &vcpus[cpu % MAX_VCPUS];
    v->in_marker = false;
    if (vaddr < MARKER_BASE || vaddr > MARKER_BASE + 64 * TICK_SLOT)
        return;
    uint64_t slot = (vaddr - MARKER_BASE) / 64;
    /* Byte 1 of a window's slot opens the window and ticks it (a single-stepped child marks
     * one operation per instruction). */
    bool tick = slot == TICK_SLOT || (vaddr - MARKER_BASE) % 64 == 1;
    if (slot != TICK_SLOT)
        v->window = slot;
    if (!tick || !v->window)
        return;
    if (!v->ticks && !(v->ticks = calloc(MARKER_SLOTS, sizeof *v->ticks))) {
        fprintf(stderr, "memtrace: out of memory for tick counts\n");
        abort();
    }
    v->ticks[v->window]++;
}

/* The marker's encoding: DS, an optional REX prefix, MOV r8, r/m8 (0x8a). Other DS-prefixed
 * instructions (CET's notrack jumps are 3e ff) are not markers. */
static bool is_marker(struct qemu_plugin_insn *insn)
{
    size_t n = qemu_plugin_insn_size(insn);
    const uint8_t *b = qemu_plugin_insn_data(insn);
    if (n < 3 || b[0] != 0x3e)
        return false;
    return b[1] == 0x8a || ((b[1] & 0xf0) == 0x40 && b[2] == 0x8a);
}

/* The class of an x86-64 instruction from its bytes: legacy and REX prefixes skipped, then
 * RET (C3, C2 iw), CALL r/m (FF /2), JMP r/m (FF /4), CALL rel32 (E8), LFENCE (0F AE E8-EF),
 * SWAPGS (0F 01 F8). */
static enum insn_class classify(const uint8_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && (b[i] == 0x26 || b[i] == 0x2e || b[i] == 0x36 || b[i] == 0x3e ||
                     b[i] == 0x64 || b[i] == 0x65 || b[i] == 0x66 || b[i] == 0x67 ||
                     b[i] == 0xf0 || b[i] == 0xf2 || b[i] == 0xf3))
        i++;
    if (i < n && (b[i] & 0xf0) == 0x40)
        i++;
    if (i >= n)
        return NONE;
    switch (b[i]) {
    case 0xc3:
    case 0xc2:
        return RET;
    case 0xe8:
        return CALL_DIRECT;
    case 0xff:
        if (i + 1 < n && (b[i + 1] >> 3 & 7) == 2)
            return CALL_INDIRECT;
        if (i + 1 < n && (b[i + 1] >> 3 & 7) == 4)
            return JMP_INDIRECT;
        return NONE;
    case 0x0f:
        if (i + 2 < n && b[i + 1] == 0xae && (b[i + 2] & 0xf8) == 0xe8)
            return LFENCE;
        if (i + 2 < n && b[i + 1] == 0x01 && b[i + 2] == 0xf8)
            return SWAPGS;
        return NONE;
    }
    return NONE;
}

static void kernel_insn(unsigned int cpu, void *u)
{
    struct vcpu *v = &vcpus[cpu % MAX_VCPUS];
    if (!v->window || v->in_marker)
        return;
    if (!v->insns && !(v->insns = calloc(MARKER_SLOTS, sizeof *v->insns))) {
        fprintf(stderr, "memtrace: out of memory for instruction counts\n");
        abort();
    }
    v->insns[v->window][(uintptr_t)u]++;
}

static void translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (qemu_plugin_insn_vaddr(insn) >= KERNEL_HALF) {
            enum insn_class c =
                classify(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn));
            if (c != NONE)
                qemu_plugin_register_vcpu_insn_exec_cb(insn, kernel_insn, QEMU_PLUGIN_CB_NO_REGS,
                                                       (void *)(uintptr_t)c);
            if (count_lines)
                qemu_plugin_register_vcpu_mem_cb(insn, kernel_access, QEMU_PLUGIN_CB_NO_REGS,
                                                 QEMU_PLUGIN_MEM_RW, NULL);
        } else if (is_marker(insn)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, marker_start, QEMU_PLUGIN_CB_NO_REGS,
                                                   NULL);
            /* RW: QEMU 7.2 calls a callback registered for reads alone on no access. */
            qemu_plugin_register_vcpu_mem_cb(insn, marker, QEMU_PLUGIN_CB_NO_REGS,
                                             QEMU_PLUGIN_MEM_RW, NULL);
        }
    }
}

static void write_out(qemu_plugin_id_t id, void *u)
{
    FILE *f = fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "memtrace: cannot write %s\n", out_path);
        return;
    }
    for (int c = 0; c < MAX_VCPUS; c++)
        for (size_t i = 0; i < vcpus[c].cap; i++) {
            struct entry *e = &vcpus[c].table[i];
            if (!e->key)
                continue;
            uint64_t line = (e->key & ((1ull << 42) - 1)) << 6;
            if (line >> 47 & 1) /* the kernel half: sign-extend (user addresses stay) */
                line |= 0xffffull << 48;
            fprintf(f, "%llu %llx %llu %llu %u\n", (unsigned long long)(e->key >> 42),
                    (unsigned long long)line, (unsigned long long)e->reads,
                    (unsigned long long)e->writes, e->ops);
        }
    for (int c = 0; c < MAX_VCPUS; c++)
        for (uint64_t w = 0; vcpus[c].ticks && w < MARKER_SLOTS; w++)
            if (vcpus[c].ticks[w])
                fprintf(f, "T %llu %u\n", (unsigned long long)w, vcpus[c].ticks[w]);
    for (int c = 0; c < MAX_VCPUS; c++)
        for (uint64_t w = 0; vcpus[c].insns && w < MARKER_SLOTS; w++) {
            uint64_t *k = vcpus[c].insns[w], any = 0;
            for (int i = 0; i < CLASSES; i++)
                any |= k[i];
            if (any)
                fprintf(f, "I %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)w,
                        (unsigned long long)k[RET], (unsigned long long)k[CALL_INDIRECT],
                        (unsigned long long)k[JMP_INDIRECT], (unsigned long long)k[CALL_DIRECT],
                        (unsigned long long)k[LFENCE], (unsigned long long)k[SWAPGS]);
        }
    fclose(f);
}

__attribute__((visibility("default"))) int
qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "out=", 4))
            out_path = argv[i] + 4;
        else if (!strcmp(argv[i], "lines=off"))
            count_lines = false;
    if (!out_path) {
        fprintf(stderr, "memtrace: expected the argument out=FILE\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
    qemu_plugin_register_atexit_cb(id, write_out, NULL);
    return 0;
}
