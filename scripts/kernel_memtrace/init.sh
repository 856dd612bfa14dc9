#!/bin/busybox sh
# /init of the memtrace guest (scripts/kernel_memtrace/run.sh): each driver scenario with its
# windows marked for the memtrace plugin, its windows and the kernel's section boundaries
# printed on the console, then power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
# Debian maps anonymous memory with 2 MiB pages where it can; the recording host (and the
# model's fault path) fault 4 KiB pages: huge pages only where asked for, as there.
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
scale=$(cat /scale)
echo "memtrace-release: $(uname -r)"
echo "memtrace-scale: $scale"
i=0
for s in $(cat /scenarios); do
    KHARDEN_WINDOW_MARKERS=$i /bin/kharden kernel drive $s --windows /tmp/$s.win --scale $scale \
        || echo "memtrace-error: scenario $s failed"
    # A window's marker slot is 1 + scenario * 65536 + its line's index in the file.
    awk -v i=$i -v s=$s '{print "memtrace-win: " i " " s " " NR - 1 " " $0}' /tmp/$s.win
    i=$((i + 1))
done
# The image's sections, to class each line the kernel touched.
grep -E ' (_text|_etext|__start_rodata|__end_rodata|_sdata|_edata|__bss_start|__bss_stop|__init_begin|__init_end|_end)$' /proc/kallsyms \
    | sed 's/^/memtrace-sym: /'
echo "memtrace: done"
poweroff -f
