#!/bin/sh
# Boot Debian's 6.1 kernel under qemu (TCG), freshly, with only an ssdd-like run in it, and
# capture where the kernel placed what the run allocated (kmem tracepoints) and where the
# kernel half's page tables on the step's walks are (a walk through QEMU's monitor):
#   bash scripts/guest_placement/run.sh OUT.txt [RAM_MIB] [PAIRS] [STEPS]
# Needs qemu-system-x86, linux-image-6.1.0-*-amd64 and busybox-static (apt-get).
set -eu
out=$1; ram=${2:-2048}; pairs=${3:-10}; steps=${4:-2000}
here=$(cd "$(dirname "$0")" && pwd)
kernel=$(ls /boot/vmlinuz-6.1.0-*-amd64 | head -n1)
work=$(mktemp -d)
mkdir -p "$work/root/bin" "$work/root/proc" "$work/root/sys" "$work/root/dev"
cp /bin/busybox "$work/root/bin/busybox"
gcc -O2 -static -o "$work/root/ssdd_steps" "$here/ssdd_steps.c"
sed "s/\${PAIRS:-10}/$pairs/; s/\${STEPS:-2000}/$steps/" "$here/init.sh" > "$work/root/init"
chmod +x "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"
timeout 900 qemu-system-x86_64 -accel tcg -cpu max,la57=off -m "$ram" -smp 1 -kernel "$kernel" \
    -initrd "$work/initrd.gz" -append "console=ttyS0 nokaslr no_hash_pointers memblock=debug quiet panic=-1" \
    -display none -serial "file:$out" -monitor "unix:$work/monitor,server,nowait" -no-reboot &
qemu=$!
sleep 1
# The kernel half's page tables predate the trace: walk them through the monitor once the
# guest has printed everything (it then idles), and quit.
python3 "$here/kernel_tables.py" "$work/monitor" "$out" > "$work/tables.txt" || { kill $qemu; exit 1; }
sleep 2; kill $qemu 2>/dev/null || true
wait $qemu || true
cat "$work/tables.txt" >> "$out"
rm -rf "$work"
echo "$kernel, $ram MiB, $pairs pairs x $steps steps: $(wc -l < "$out") lines in $out"
