#!/bin/busybox sh
# /init of the text-mapping guest: print the image's section bounds, then idle in the kernel
# so that the host can read the kernel's page tables through QEMU's monitor (`info tlb`).
/bin/busybox --install -s /bin
mount -t proc proc /proc
grep -w -E "_text|_etext|__entry_text_start|__start_rodata|__end_rodata|__end_rodata_hpage_align|_sdata|_edata|__bss_start|__bss_stop|_end" /proc/kallsyms | sed 's/^/text-mapping-symbol: /'
grep -E "DirectMap" /proc/meminfo | sed 's/^/text-mapping-meminfo: /'
dmesg | grep -i -E "page tables isolation|Write protecting|Freeing unused kernel" | sed 's/^/text-mapping-dmesg: /'
echo "text-mapping: ready"
while true; do sleep 3600; done
