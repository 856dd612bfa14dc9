//! The syscall names of the trace header, read from the installed kernel headers.

use std::collections::HashMap;

/// x86-64 syscall names from the installed kernel headers (`#define __NR_read 0`).
pub fn syscall_names(arch: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    if arch != "x86_64" {
        return out;
    }
    for path in [
        "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "/usr/include/asm/unistd_64.h",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                let mut it = line.split_whitespace();
                if let (Some("#define"), Some(name), Some(nr)) = (it.next(), it.next(), it.next()) {
                    if let (Some(n), Ok(nr)) = (name.strip_prefix("__NR_"), nr.parse::<u32>()) {
                        out.insert(nr, n.to_string());
                    }
                }
            }
            break;
        }
    }
    out
}
