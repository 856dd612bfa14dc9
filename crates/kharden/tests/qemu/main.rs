//! Measurements made again on Debian's 6.1 kernel booted under qemu (TCG), checked against
//! what the model and the committed files assume. One test binary, so the harness runs the
//! guests side by side: each is one mostly single-threaded qemu process. Needs
//! qemu-system-x86_64, Debian's linux-image-6.1.0-*-amd64 in /boot and busybox-static;
//! scripts/test.sh runs them where they are:
//! `cargo test --release -p kharden --test qemu -- --ignored qemu_`.

mod ftrace_footprint;
mod placement;
mod text_mapping;
