//! Compiles the C refcount implementations for the host with the kernel's code-generation
//! flags (CONFIG_FRAME_POINTER: -fno-omit-frame-pointer -fno-optimize-sibling-calls).
//! On an arm64 host both the LL/SC (-march=armv8-a) and LSE (-march=armv8.1-a) forms are
//! built; the LSE ones only run where the CPU has LSE (checked at run time).
use std::env;
use std::path::PathBuf;

const KERNEL_FLAGS: &[&str] = &[
    "-fno-omit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-fno-strict-aliasing",
    "-fno-common",
];

fn build() -> cc::Build {
    let mut b = cc::Build::new();
    b.opt_level(2).warnings(true).include("c");
    for flag in KERNEL_FLAGS {
        b.flag(flag);
    }
    b
}

fn main() {
    for f in ["rc.h", "arch.h", "impl.c", "registry.c", "selftest.c"] {
        println!("cargo:rerun-if-changed=c/{f}");
    }
    println!("cargo::rustc-check-cfg=cfg(kharden_no_native)");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    match arch.as_str() {
        "x86_64" => {
            build()
                .file("c/impl.c")
                .file("c/registry.c")
                .file("c/selftest.c")
                .compile("kharden_rc_impl");
        }
        "aarch64" => {
            // impl.c twice (LL/SC and LSE objects, in separate directories so they do not
            // collide), then one archive with the shared code, so link order cannot matter.
            let out = PathBuf::from(env::var("OUT_DIR").unwrap());
            let llsc = build()
                .out_dir(out.join("llsc"))
                .flag("-march=armv8-a")
                .flag("-mno-outline-atomics")
                .file("c/impl.c")
                .compile_intermediates();
            let lse = build()
                .out_dir(out.join("lse"))
                .flag("-march=armv8.1-a")
                .file("c/impl.c")
                .compile_intermediates();
            build()
                .flag("-mno-outline-atomics")
                .objects(llsc)
                .objects(lse)
                .file("c/registry.c")
                .file("c/selftest.c")
                .compile("kharden_rc_impl");
        }
        other => {
            // No native implementations: the crate still builds (model only).
            println!(
                "cargo:warning=kharden-refcount: no native refcount implementations for {other}"
            );
            println!("cargo:rustc-cfg=kharden_no_native");
        }
    }
}
