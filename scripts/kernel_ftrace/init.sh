#!/bin/busybox sh
# /init of the ftrace guest (scripts/kernel_ftrace/run.sh): each driver scenario under the
# function tracer, its trace reduced to records on the console, then power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tracefs nodev /sys/kernel/tracing
T=/sys/kernel/tracing
scale=$(cat /scale)
echo "ftrace-release: $(uname -r)"
echo "ftrace-version: $(cat /proc/version)"
echo "ftrace-scale: $scale"
echo mono > $T/trace_clock
echo 98304 > $T/buffer_size_kb
echo 1 > $T/options/function-fork
echo function > $T/current_tracer
for s in $(cat /scenarios); do
    echo 0 > $T/tracing_on
    echo > $T/trace
    # The traced shell becomes the driver: set_ftrace_pid names it before it runs.
    sh -c "echo \$\$ > $T/set_ftrace_pid; echo 1 > $T/tracing_on; exec /bin/kharden kernel drive $s --windows /tmp/$s.win --scale $scale" \
        || echo "ftrace-error: scenario $s failed"
    echo 0 > $T/tracing_on
    lost=$(grep -h overrun $T/per_cpu/cpu*/stats | awk '{n += $2} END {print n}')
    echo "ftrace-scenario: $s windows $(wc -l < /tmp/$s.win) overrun $lost"
    # Operations per (own, others) pair of paths: summarize.py counts an others-only path
    # (exit, the IPI handlers) by the windows it ran beside.
    awk -v s=$s '{ops[$2 " " $3] += $7} END {for (p in ops) print "ftrace-ops: " s " " p " " ops[p]}' /tmp/$s.win
    awk -v scenario=$s -f /reduce.awk /tmp/$s.win $T/trace
    echo > $T/set_ftrace_pid
done
# The image's text symbols (no modules are loaded): offsets and sizes of the traced functions.
grep -E ' [tT] ' /proc/kallsyms | grep -v '\[' | sed 's/^/ftrace-sym: /'
# What the tracer can see at all: lib/ and arch/x86/lib are built without its hooks, noinstr
# and notrace functions have none.
grep -v '\[' $T/available_filter_functions | sed 's/^/ftrace-traceable: /'
echo "ftrace: done"
poweroff -f
