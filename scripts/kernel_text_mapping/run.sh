#!/bin/sh
# Boot Debian's 6.1 kernel under qemu (TCG) and read, through QEMU's monitor, how the booted
# kernel maps its own image (text, rodata, data): 2 MiB or 4 KiB pages.
#   bash scripts/kernel_text_mapping/run.sh OUT_DIR [KERNEL_ARGS...]
# Writes OUT_DIR/console.txt (the section bounds from /proc/kallsyms) and OUT_DIR/tlb.txt
# (`info tlb`: every present leaf of the current page tables), then
#   python3 scripts/kernel_text_mapping/summarize.py OUT_DIR
# prints the page sizes over each section. Needs qemu-system-x86, linux-image-6.1.0-*-amd64,
# busybox-static and gcc (apt-get).
set -eu
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
kernel=$(ls /boot/vmlinuz-6.1.0-*-amd64 | head -n1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/root/bin" "$work/root/proc"
cp /bin/busybox "$work/root/bin/busybox"
cp "$here/init.sh" "$work/root/init"
chmod +x "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"
qemu-system-x86_64 -accel tcg -cpu "${CPU:-max,la57=off}" -m 2048 -smp 1 -kernel "$kernel" \
    -initrd "$work/initrd.gz" -append "console=ttyS0 nokaslr quiet panic=-1 $*" \
    -monitor "unix:$work/monitor,server,nowait" -display none -serial "file:$out/console.txt" \
    -no-reboot &
qemu=$!
python3 "$here/monitor.py" "$work/monitor" "$out/console.txt" "$out/tlb.txt" || { kill $qemu; exit 1; }
# monitor.py asked QEMU to quit; make sure it does.
sleep 5; kill $qemu 2>/dev/null || true
wait $qemu || true
echo "$kernel: $(grep -c . "$out/tlb.txt") mappings in $out/tlb.txt"
