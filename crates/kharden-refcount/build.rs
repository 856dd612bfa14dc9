//! Compiles the C refcount implementations for the host with the kernel's code-generation
//! flags (CONFIG_FRAME_POINTER: -fno-omit-frame-pointer -fno-optimize-sibling-calls).
//! On an arm64 host both the LL/SC (-march=armv8-a) and LSE (-march=armv8.1-a) forms are
//! built; the LSE ones only run where the CPU has LSE (checked at run time).
use std::env;

const KERNEL_FLAGS: &[&str] = &[
    "-fno-omit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-fno-strict-aliasing",
    "-fno-common",
];

fn build(name: &str, files: &[&str], extra: &[&str]) {
    let mut b = cc::Build::new();
    b.opt_level(2).warnings(true).include("c");
    for f in files {
        b.file(format!("c/{f}"));
    }
    for flag in KERNEL_FLAGS.iter().chain(extra) {
        b.flag(flag);
    }
    b.compile(name);
}

fn main() {
    for f in ["rc.h", "arch.h", "impl.c", "registry.c", "selftest.c"] {
        println!("cargo:rerun-if-changed=c/{f}");
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    match arch.as_str() {
        "x86_64" => build("kharden_rc_impl", &["impl.c", "registry.c", "selftest.c"], &[]),
        "aarch64" => {
            build("kharden_rc_llsc", &["impl.c"], &["-march=armv8-a", "-mno-outline-atomics"]);
            build("kharden_rc_lse", &["impl.c"], &["-march=armv8.1-a"]);
            build("kharden_rc_common", &["registry.c", "selftest.c"], &["-mno-outline-atomics"]);
        }
        other => {
            // No native implementations: the crate still builds (model only).
            println!("cargo:warning=kharden-refcount: no native refcount implementations for {other}");
            println!("cargo:rustc-cfg=kharden_no_native");
        }
    }
    println!("cargo::rustc-check-cfg=cfg(kharden_no_native)");
}
