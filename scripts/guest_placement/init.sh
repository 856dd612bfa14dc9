#!/bin/busybox sh
# /init of the placement guest: trace where the kernel puts what an ssdd run allocates.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tracefs tracefs /sys/kernel/tracing
T=/sys/kernel/tracing
echo 32768 > $T/buffer_size_kb
echo 1 > $T/events/kmem/mm_page_alloc/enable
echo stacktrace > $T/events/kmem/mm_page_alloc/trigger
echo 1 > $T/events/kmem/kmem_cache_alloc/enable
echo 1 > $T/events/kmem/kmalloc/enable
# The pages of vmalloc'd kernel stacks come from the bulk allocator, which mm_page_alloc does
# not see: catch them where vmalloc maps them (pages[0..3], struct page pointers), from the
# start, since fork may reuse a stack an exited task left in the per-CPU cache. The new
# task's stack is task_struct.stack (+32 on x86-64 6.1: thread_info, __state, then stack).
echo "p:kstack __vmap_pages_range_noflush addr=%di p0=+0(%cx):u64 p1=+8(%cx):u64 p2=+16(%cx):u64 p3=+24(%cx):u64" >> $T/kprobe_events
echo "r:forked copy_process task=\$retval stack=+32(\$retval):u64" >> $T/kprobe_events
echo 1 > $T/events/kprobes/enable || echo "placement: the kprobes were refused"
echo 1 > $T/events/sched/sched_process_fork/enable
# Per-CPU symbols' addresses are their offsets in each CPU's per-CPU unit.
grep -w -E "runqueues|current_task|__preempt_count" /proc/kallsyms | sed 's/^/placement-percpu: /'
echo 1 > $T/tracing_on
echo "placement: start" > $T/trace_marker
/ssdd_steps ${PAIRS:-10} ${STEPS:-2000} 2
echo "placement: end" > $T/trace_marker
echo 0 > $T/tracing_on
echo "=== iomem"; cat /proc/iomem
echo "=== meminfo"; cat /proc/meminfo
echo "=== dmesg"; dmesg | grep -i -E "percpu|pcpu|Memory:|e820"
echo "=== trace"; cat $T/trace
echo "=== end"
# run.sh walks the kernel page tables through the monitor now, then quits the VM.
while true; do sleep 3600; done
