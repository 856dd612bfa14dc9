//! Tracepoint payloads: the `format` of a tracepoint (from perf.data's tracing data or from
//! tracefs), the layout of the fields kharden reads, and which family a tracepoint is.

use std::path::Path;

/// One field of a tracepoint's `format`.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    /// `__data_loc`: the field holds (length << 16 | offset) of a dynamic string.
    pub data_loc: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventFormat {
    pub name: String,
    pub fields: Vec<Field>,
    pub print_fmt: String,
}

impl EventFormat {
    /// Parses the text of a tracefs `format` file.
    pub fn parse(text: &str) -> Option<EventFormat> {
        let mut f = EventFormat::default();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                f.name = n.trim().to_string();
            } else if let Some(p) = line.strip_prefix("print fmt:") {
                f.print_fmt = p.trim().to_string();
            } else if let Some(rest) = line.strip_prefix("field:") {
                let mut parts = rest.split(';').map(str::trim);
                let decl = parts.next()?;
                let mut offset = None;
                let mut size = None;
                for p in parts {
                    if let Some(v) = p.strip_prefix("offset:") {
                        offset = v.trim().parse().ok();
                    } else if let Some(v) = p.strip_prefix("size:") {
                        size = v.trim().parse().ok();
                    }
                }
                let ident = decl
                    .rsplit(|c: char| c.is_whitespace() || c == '*')
                    .next()?;
                let ident = ident.split('[').next()?.to_string();
                f.fields.push(Field {
                    name: ident,
                    offset: offset?,
                    size: size?,
                    data_loc: decl.contains("__data_loc"),
                });
            }
        }
        (!f.name.is_empty()).then_some(f)
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Finds the `format` text of tracepoint `name` inside perf's TRACING_DATA section.
pub(super) fn format_from_tracing_data(data: &[u8], name: &str) -> Option<EventFormat> {
    let needle = format!("name: {name}\n");
    let text = String::from_utf8_lossy(data);
    let start = text.find(&needle)?;
    let rest = &text[start..];
    let pf = rest.find("print fmt:")?;
    let end = rest[pf..].find('\n').map_or(rest.len(), |e| pf + e);
    EventFormat::parse(&rest[..end])
}

pub(super) fn format_from_tracefs(tp: &str) -> Option<EventFormat> {
    let (sys, name) = tp.split_once(':')?;
    super::TRACEFS_ROOTS.iter().find_map(|r| {
        let text = std::fs::read_to_string(
            Path::new(r)
                .join("events")
                .join(sys)
                .join(name)
                .join("format"),
        )
        .ok()?;
        EventFormat::parse(&text)
    })
}

/// Reads integer and string fields out of a tracepoint's raw payload.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) fields: Vec<Option<Field>>,
}

impl Layout {
    pub(super) fn new(fmt: &EventFormat, names: &[&str]) -> Layout {
        Layout {
            fields: names.iter().map(|n| fmt.field(n).cloned()).collect(),
        }
    }
    pub(super) fn int(&self, raw: &[u8], i: usize) -> Option<u64> {
        let f = self.fields.get(i)?.as_ref()?;
        let b = raw.get(f.offset..f.offset + f.size)?;
        Some(match f.size {
            1 => b[0] as u64,
            2 => u16::from_le_bytes(b.try_into().ok()?) as u64,
            4 => u32::from_le_bytes(b.try_into().ok()?) as u64,
            8 => u64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
    /// Field `i` read as an array of little-endian u64 (`unsigned long args[6]`).
    pub(super) fn u64s<const N: usize>(&self, raw: &[u8], i: usize) -> Option<[u64; N]> {
        let f = self.fields.get(i)?.as_ref()?;
        if f.size != N * 8 {
            return None;
        }
        let b = raw.get(f.offset..f.offset + f.size)?;
        let mut out = [0u64; N];
        for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
            *o = u64::from_le_bytes(c.try_into().ok()?);
        }
        Some(out)
    }
    pub(super) fn i32(&self, raw: &[u8], i: usize) -> Option<i32> {
        self.int(raw, i).map(|v| v as u32 as i32)
    }
    pub(super) fn str<'a>(&self, raw: &'a [u8], i: usize) -> Option<&'a str> {
        let f = self.fields.get(i)?.as_ref()?;
        let bytes = if f.data_loc {
            let loc = u32::from_le_bytes(raw.get(f.offset..f.offset + 4)?.try_into().ok()?);
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            raw.get(off..off + len)?
        } else {
            raw.get(f.offset..f.offset + f.size)?
        };
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Switch,
    Migrate,
    Fork,
    Exec,
    Exit,
    SysEnter,
    SysExit,
    PageAlloc,
    PageFree,
    TlbFlush,
    FaultUser,
    FaultKernel,
    /// The recording's cpu-clock samples of the command (its user time: prepass.rs).
    CpuClock,
    Other,
}

pub(super) fn kind_of(name: &str) -> (Kind, &'static [&'static str]) {
    match name {
        "sched:sched_switch" => (Kind::Switch, &["prev_pid", "prev_state", "next_pid"]),
        "sched:sched_migrate_task" => (Kind::Migrate, &["pid", "orig_cpu", "dest_cpu"]),
        "sched:sched_process_fork" => (Kind::Fork, &["parent_pid", "child_pid", "child_comm"]),
        "sched:sched_process_exec" => (Kind::Exec, &["filename", "pid"]),
        "sched:sched_process_exit" => (Kind::Exit, &["pid"]),
        "raw_syscalls:sys_enter" => (Kind::SysEnter, &["id", "args"]),
        "raw_syscalls:sys_exit" => (Kind::SysExit, &["id", "ret"]),
        "kmem:mm_page_alloc" => (Kind::PageAlloc, &["pfn", "order", "gfp_flags"]),
        "kmem:mm_page_free" => (Kind::PageFree, &["pfn", "order"]),
        "tlb:tlb_flush" => (Kind::TlbFlush, &["reason", "pages"]),
        "exceptions:page_fault_user" => (Kind::FaultUser, &["address", "error_code"]),
        "exceptions:page_fault_kernel" => (Kind::FaultKernel, &["address", "error_code"]),
        n if n == "cpu-clock" || n.starts_with("cpu-clock/") => (Kind::CpuClock, &[]),
        _ => (Kind::Other, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_format_file() {
        let text = "name: sched_process_fork\nID: 313\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:16;\tsize:16;\tsigned:0;\n\nprint fmt: \"comm=%s\", REC->x\n";
        let f = EventFormat::parse(text).unwrap();
        assert_eq!(f.name, "sched_process_fork");
        assert_eq!(
            f.field("parent_comm").unwrap(),
            &Field {
                name: "parent_comm".into(),
                offset: 8,
                size: 4,
                data_loc: true
            }
        );
        assert_eq!(f.field("child_comm").unwrap().size, 16);
        assert_eq!(f.print_fmt, "\"comm=%s\", REC->x");
        // A payload: data_loc string "make" at offset 32, parent_pid 77, child_comm "cc1".
        let mut raw = vec![0u8; 40];
        raw[8..12].copy_from_slice(&((5u32 << 16) | 32).to_le_bytes());
        raw[12..16].copy_from_slice(&77u32.to_le_bytes());
        raw[16..19].copy_from_slice(b"cc1");
        raw[32..37].copy_from_slice(b"make\0");
        let l = Layout::new(&f, &["parent_comm", "parent_pid", "child_comm", "missing"]);
        assert_eq!(l.str(&raw, 0), Some("make"));
        assert_eq!(l.i32(&raw, 1), Some(77));
        assert_eq!(l.str(&raw, 2), Some("cc1"));
        assert_eq!(l.int(&raw, 3), None);
        assert_eq!(l.int(&raw[..10], 1), None);
    }
}
