/* A QEMU user-mode TCG plugin: per window of `window=` guest instructions, the distinct
   4 KiB pages the program fetched instructions from and the distinct 4 KiB pages it loaded
   or stored; at exit, their mean and quantiles over the windows, appended to `out=`.
   What a TLB flush at the start of a window makes the program walk again (each page once,
   as long as the TLBs hold the window's pages). The declarations below are those of QEMU's
   plugin API, version 1 (include/qemu/qemu-plugin.h of QEMU 7.2, which Debian 12 ships
   without the header). Run by scripts/user_pages/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb; struct qemu_plugin_insn; typedef struct qemu_info_t qemu_info_t;
enum { CB_NO_REGS = 0 };
enum { MEM_R = 1, MEM_W = 2, MEM_RW = 3 };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, void (*)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, void (*)(unsigned int, void *), int, void *);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *, void (*)(unsigned int, qemu_plugin_meminfo_t, uint64_t, void *), int, int, void *);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, void (*)(qemu_plugin_id_t, void *), void *);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define HB (1 << 20)
static uint64_t keys[HB]; static uint32_t gen[HB]; static uint32_t g = 1;
static const char *out = "/dev/stderr";
static uint64_t W = 135600, ins, ti, td;
static uint64_t *tv, *dv, nw, cap;
static int add(uint64_t k) {
  uint64_t h = (k * 0x9E3779B97F4A7C15ULL) >> 44;
  for (;; h = (h + 1) & (HB - 1)) {
    if (gen[h] != g) { gen[h] = g; keys[h] = k; return 1; }
    if (keys[h] == k) return 0;
  }
}
struct tbinfo { uint32_t n; uint32_t npages; uint64_t pages[4]; };
static void close_window(void) {
  if (nw == cap) { cap = cap ? 2 * cap : 4096; tv = realloc(tv, cap * 8); dv = realloc(dv, cap * 8); }
  tv[nw] = ti; dv[nw] = td; nw++; ti = td = 0; ins = 0;
  if (++g == 0) { memset(gen, 0, sizeof gen); g = 1; }
}
static void tb_exec(unsigned int vcpu, void *u) {
  struct tbinfo *t = u;
  for (uint32_t i = 0; i < t->npages; i++) ti += add(t->pages[i] << 1);
  ins += t->n;
  if (ins >= W) close_window();
}
static void mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t va, void *u) {
  td += add(((va >> 12) << 1) | 1);
}
static void trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  size_t n = qemu_plugin_tb_n_insns(tb);
  struct tbinfo *t = calloc(1, sizeof *t);
  t->n = n;
  for (size_t i = 0; i < n; i++) {
    struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
    uint64_t a = qemu_plugin_insn_vaddr(insn), b = a + qemu_plugin_insn_size(insn) - 1;
    for (uint64_t p = a >> 12; p <= b >> 12; p++) {
      bool seen = false;
      for (uint32_t j = 0; j < t->npages; j++) seen |= t->pages[j] == p;
      if (!seen && t->npages < 4) t->pages[t->npages++] = p;
    }
    qemu_plugin_register_vcpu_mem_cb(insn, mem, CB_NO_REGS, MEM_RW, NULL);
  }
  qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, CB_NO_REGS, t);
}
static int cmp(const void *a, const void *b) { uint64_t x = *(uint64_t *)a, y = *(uint64_t *)b; return x < y ? -1 : x > y; }
static void at_exit(qemu_plugin_id_t id, void *p) {
  if (!nw) return;
  FILE *f = fopen(out, "a");
  if (!f) { perror(out); return; }
  double st = 0, sd = 0;
  for (uint64_t i = 0; i < nw; i++) { st += tv[i]; sd += dv[i]; }
  qsort(tv, nw, 8, cmp); qsort(dv, nw, 8, cmp);
  fprintf(f, "pages: %lu windows of %lu instructions: text pages mean %.1f p10 %lu p50 %lu p90 %lu; data pages mean %.1f p10 %lu p50 %lu p90 %lu\n",
          nw, W, st / nw, tv[nw / 10], tv[nw / 2], tv[nw * 9 / 10], sd / nw, dv[nw / 10], dv[nw / 2], dv[nw * 9 / 10]);
  fclose(f);
}
__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
  for (int i = 0; i < argc; i++) if (!strncmp(argv[i], "out=", 4)) out = argv[i] + 4;
    else if (!strncmp(argv[i], "window=", 7)) W = strtoull(argv[i] + 7, NULL, 10);
  qemu_plugin_register_vcpu_tb_trans_cb(id, trans);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
