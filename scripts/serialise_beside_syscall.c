/*
 * serialise_beside_syscall.c - what a serialising instruction costs beside a user/kernel
 * boundary (issue 53 item 4; docs/design/mechanism-cost.md section 5).
 *
 * PTI writes CR3 just after kernel entry and just before kernel exit. MOV to CR3 is
 * serialising and cannot run in user mode, but IRETQ to the same ring can: this times a
 * getppid loop through SYSCALL/SYSRET alone, with an IRETQ just before and just after each
 * call, and the IRETQs alone. If the serialising instructions destroyed overlap at the
 * boundary, the second would cost more than the first plus the third. TSC cycles per
 * iteration: median and p10/p90 over batches of 256, the configurations alternated.
 *
 * Build and run:  gcc -O2 -o ser scripts/serialise_beside_syscall.c && ./ser 301
 * On the recording host (2-CPU KVM guest, AMD EPYC family 25), 2026-11-29, three runs:
 * syscall 313.7-315.8, iretq+syscall+iretq 510.5-525.3, iretq+iretq 197.7-197.8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <x86intrin.h>
static inline uint64_t tsc(void){unsigned a;uint64_t t=__rdtscp(&a);_mm_lfence();return t;}
static inline void iretq(void){
 __asm__ volatile("mov %%ss, %%eax\n\tpush %%rax\n\tlea 8(%%rsp), %%rax\n\tpush %%rax\n\tpushfq\n\tmov %%cs, %%eax\n\tpush %%rax\n\tlea 1f(%%rip), %%rax\n\tpush %%rax\n\tiretq\n1:\n":::"rax","memory","cc");}
static inline long sys_getppid(void){long r=SYS_getppid;__asm__ volatile("syscall":"+a"(r)::"rcx","r11","memory");return r;}
#define N 256
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){int B=argc>1?atoi(argv[1]):201;double *m[4];for(int k=0;k<4;k++)m[k]=malloc(B*sizeof(double));
 for(int b=0;b<B;b++){for(int k=0;k<4;k++){uint64_t t=tsc();
  for(int i=0;i<N;i++){switch(k){case 0: sys_getppid();break;case 1: iretq();sys_getppid();iretq();break;case 2: iretq();iretq();break;case 3: iretq();sys_getppid();break;}}
  m[k][b]=(double)(tsc()-t)/N;}}
 const char*name[4]={"syscall","iretq+syscall+iretq","iretq+iretq","iretq+syscall"};
 for(int k=0;k<4;k++){qsort(m[k],B,sizeof(double),cmp);printf("%-22s median %.1f p10 %.1f p90 %.1f\n",name[k],m[k][B/2],m[k][B/10],m[k][9*B/10]);}
 return 0;}
