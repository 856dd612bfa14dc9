//! Kernel text symbols from /proc/kallsyms: each function's offset from `_text` and its size
//! (up to the next symbol), so sampled instruction pointers become functions, pages and lines
//! of the kernel image whatever KASLR chose.

/// A function of the kernel image's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    /// Bytes from `_text`.
    pub offset: u64,
    /// Bytes to the next text symbol (kallsyms gives no sizes).
    pub size: u64,
}

#[derive(Debug)]
pub struct Kallsyms {
    /// The runtime address of `_text`.
    pub text_start: u64,
    /// `_etext - _text`.
    pub text_bytes: u64,
    /// Sorted by offset, sizes filled.
    pub functions: Vec<Function>,
}

impl Kallsyms {
    pub fn read() -> kharden::Result<Kallsyms> {
        let text = std::fs::read_to_string("/proc/kallsyms")
            .map_err(|e| kharden::Error::at("/proc/kallsyms", format!("cannot read: {e}")))?;
        Self::parse("/proc/kallsyms", &text)
    }

    /// Parses kallsyms text; the core kernel's text symbols only (module symbols, which carry
    /// a `[module]` suffix, lie outside `_text.._etext`).
    pub fn parse(place: &str, text: &str) -> kharden::Result<Kallsyms> {
        let mut syms: Vec<(u64, String)> = Vec::new();
        let (mut start, mut end) = (None, None);
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            match name {
                "_text" => start = Some(addr),
                "_etext" => end = Some(addr),
                _ => {}
            }
            if matches!(kind, "t" | "T" | "w" | "W") && f.next().is_none() {
                syms.push((addr, name.to_string()));
            }
        }
        let (Some(start), Some(end)) = (start, end) else {
            return Err(kharden::Error::at(place, "no _text/_etext symbols"));
        };
        if start == 0 {
            return Err(kharden::Error::at(
                place,
                "addresses read as zero: run as root (kptr_restrict hides them)",
            ));
        }
        // Above this a "function" is a marker followed by padding (__entry_text_end, the SRSO
        // thunk area, each ~1 MiB to the next symbol here); the largest real function of the
        // 6.18 x86 text spans 20.7 KiB (hidinput_connect).
        const MAX_FUNCTION: u64 = 32 * 1024;
        syms.retain(|(a, _)| (start..end).contains(a));
        syms.sort();
        syms.dedup_by_key(|(a, _)| *a);
        let functions = syms
            .iter()
            .enumerate()
            .map(|(i, (a, name))| {
                let next = syms.get(i + 1).map_or(end, |(n, _)| *n);
                let size = next - a;
                Function {
                    name: name.clone(),
                    offset: a - start,
                    // A marker is counted as the one line it starts.
                    size: if size > MAX_FUNCTION {
                        64 - a % 64
                    } else {
                        size
                    },
                }
            })
            .collect();
        Ok(Kallsyms {
            text_start: start,
            text_bytes: end - start,
            functions,
        })
    }

    /// The function containing runtime address `ip`, by index.
    pub fn lookup(&self, ip: u64) -> Option<usize> {
        let off = ip.checked_sub(self.text_start)?;
        if off >= self.text_bytes {
            return None;
        }
        let i = self
            .functions
            .partition_point(|f| f.offset <= off)
            .checked_sub(1)?;
        let f = &self.functions[i];
        (off < f.offset + f.size).then_some(i)
    }

    pub fn by_name(&self, name: &str) -> Option<usize> {
        self.functions.iter().position(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "ffffffff81000000 T _text\n\
        ffffffff81000080 T entry_SYSCALL_64\n\
        ffffffff810000c0 t helper\n\
        ffffffff81000200 D some_data\n\
        ffffffff81001000 T _etext\n\
        ffffffffc0000000 t mod_fn\t[kvm]\n";

    #[test]
    fn functions_are_sized_to_the_next_symbol_and_offset_from_text() {
        let k = Kallsyms::parse("k", TEXT).unwrap();
        assert_eq!(k.text_bytes, 0x1000);
        let names: Vec<_> = k.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["_text", "entry_SYSCALL_64", "helper"]);
        assert_eq!(k.functions[1].offset, 0x80);
        assert_eq!(k.functions[1].size, 0x40);
        assert_eq!(k.functions[2].size, 0x1000 - 0xc0);
        assert_eq!(k.lookup(0xffffffff810000c5), Some(2));
        assert_eq!(k.lookup(0xffffffff81000085), Some(1));
        assert_eq!(k.lookup(0xffffffffc0000001), None);
    }

    #[test]
    fn hidden_addresses_are_an_error() {
        let e = Kallsyms::parse("k", "0000000000000000 T _text\n0000000000000000 T _etext\n")
            .unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
    }
}
