//! GFP flags: which bits mean what on the recording kernel, and the class of an allocation.
//!
//! The bit positions of `__GFP_*` flags change between kernel versions, so they are read from
//! the `kmem:mm_page_alloc` format's `__print_flags` table (which perf stores in perf.data),
//! by evaluating each flag's constant expression. When that fails, the positions of Linux
//! 4.10–6.18 are used (they are the same for the bits classification needs).

use crate::format::GfpClass;

/// The flag bits classification looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GfpBits {
    pub highmem: u64,
    pub movable: u64,
    pub fs: u64,
    pub zero: u64,
    pub write: u64,
    pub noretry: u64,
    /// Where the positions came from ("tracepoint format" or "built-in (Linux 4.10-6.18)").
    pub source: &'static str,
}

impl Default for GfpBits {
    fn default() -> Self {
        GfpBits {
            highmem: 1 << 1,
            movable: 1 << 3,
            fs: 1 << 7,
            zero: 1 << 8,
            write: 1 << 12,
            noretry: 1 << 16,
            source: "built-in (Linux 4.10-6.18)",
        }
    }
}

impl GfpBits {
    /// Reads the bits from `mm_page_alloc`'s `print fmt`; `None` if any is missing.
    pub fn from_print_fmt(fmt: &str) -> Option<GfpBits> {
        let get = |name: &str| -> Option<u64> {
            let v = flag_value(fmt, name)?;
            (v.count_ones() == 1).then_some(v)
        };
        Some(GfpBits {
            highmem: get("__GFP_HIGHMEM")?,
            movable: get("__GFP_MOVABLE")?,
            fs: get("__GFP_FS")?,
            zero: get("__GFP_ZERO")?,
            write: get("__GFP_WRITE")?,
            noretry: get("__GFP_NORETRY")?,
            source: "tracepoint format",
        })
    }

    pub fn describe(&self) -> String {
        let pos = |v: u64| v.trailing_zeros();
        format!(
            "HIGHMEM={} MOVABLE={} FS={} ZERO={} WRITE={} NORETRY={} (bit positions, from {})",
            pos(self.highmem),
            pos(self.movable),
            pos(self.fs),
            pos(self.zero),
            pos(self.write),
            pos(self.noretry),
            self.source
        )
    }

    /// The class of an allocation with these flags (FORMAT.md, "GFP classes"):
    /// not movable -> kernel; movable and highmem, and zeroed, or a plain user mask (FS set,
    /// neither WRITE nor NORETRY) -> user anonymous; other movable -> page cache.
    pub fn classify(&self, gfp: u64) -> GfpClass {
        if gfp & self.movable == 0 {
            return GfpClass::Kernel;
        }
        if gfp & self.highmem != 0 {
            if gfp & self.zero != 0 {
                return GfpClass::UserAnon;
            }
            if gfp & self.fs != 0 && gfp & (self.write | self.noretry) == 0 {
                return GfpClass::UserAnon;
            }
        }
        GfpClass::PageCache
    }
}

/// The value of flag `name` in a `__print_flags(..., { expr, "name" }, ...)` table.
fn flag_value(fmt: &str, name: &str) -> Option<u64> {
    let needle = format!("\"{name}\"");
    let at = fmt.find(&needle)?;
    let before = &fmt[..at];
    // The entry's '{' is the last unmatched one before the name.
    let mut depth = 0i32;
    let mut open = None;
    for (i, c) in before.char_indices().rev() {
        match c {
            '}' => depth += 1,
            '{' if depth == 0 => {
                open = Some(i);
                break;
            }
            '{' => depth -= 1,
            _ => {}
        }
    }
    let body = before[open? + 1..].trim_end();
    let body = body.strip_suffix(',')?;
    eval(body)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(u64),
    Ident,
    LParen,
    RParen,
    Op(&'static str),
}

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let lit = s[start..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let v = if let Some(h) = lit.strip_prefix("0x").or_else(|| lit.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()?
            } else {
                lit.parse().ok()?
            };
            out.push(Tok::Num(v));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident);
        } else {
            let two = s.get(i..i + 2);
            let t = match (c, two) {
                (_, Some("<<")) => Tok::Op("<<"),
                (_, Some(">>")) => Tok::Op(">>"),
                (b'(', _) => Tok::LParen,
                (b')', _) => Tok::RParen,
                (b'|', _) => Tok::Op("|"),
                (b'&', _) => Tok::Op("&"),
                (b'~', _) => Tok::Op("~"),
                (b'+', _) => Tok::Op("+"),
                (b'-', _) => Tok::Op("-"),
                (b'*', _) => Tok::Op("*"),
                _ => return None,
            };
            i += if matches!(t, Tok::Op("<<") | Tok::Op(">>")) {
                2
            } else {
                1
            };
            out.push(t);
        }
    }
    Some(out)
}

/// Evaluates the C constant expressions kernels print for flag values: numbers, casts,
/// parentheses, `~ << >> & | + -`.
fn eval(s: &str) -> Option<u64> {
    let toks = tokenize(s)?;
    let mut p = Parser {
        t: &toks,
        i: 0,
        depth: 0,
    };
    let v = p.expr(0)?;
    (p.i == toks.len()).then_some(v)
}

struct Parser<'a> {
    t: &'a [Tok],
    i: usize,
    depth: u32,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }
    fn prec(op: &str) -> Option<u8> {
        Some(match op {
            "|" => 1,
            "&" => 2,
            "<<" | ">>" => 3,
            "+" | "-" => 4,
            _ => return None,
        })
    }
    fn expr(&mut self, min: u8) -> Option<u64> {
        self.depth += 1;
        if self.depth > 200 {
            return None;
        }
        let mut lhs = self.unary()?;
        while let Some(Tok::Op(op)) = self.peek() {
            let op = *op;
            let Some(p) = Self::prec(op) else { break };
            if p < min {
                break;
            }
            self.i += 1;
            let rhs = self.expr(p + 1)?;
            lhs = match op {
                "|" => lhs | rhs,
                "&" => lhs & rhs,
                "<<" => lhs.checked_shl(rhs.try_into().ok()?)?,
                ">>" => lhs.checked_shr(rhs.try_into().ok()?)?,
                "+" => lhs.wrapping_add(rhs),
                "-" => lhs.wrapping_sub(rhs),
                _ => return None,
            };
        }
        self.depth -= 1;
        Some(lhs)
    }
    fn unary(&mut self) -> Option<u64> {
        match self.peek()?.clone() {
            Tok::Num(v) => {
                self.i += 1;
                Some(v)
            }
            Tok::Op("~") => {
                self.i += 1;
                Some(!self.unary()?)
            }
            Tok::LParen => {
                // A cast is '(' identifiers [*] ')'.
                let mut j = self.i + 1;
                while matches!(self.t.get(j), Some(Tok::Ident) | Some(Tok::Op("*"))) {
                    j += 1;
                }
                if j > self.i + 1 && self.t.get(j) == Some(&Tok::RParen) {
                    self.i = j + 1;
                    return self.unary();
                }
                self.i += 1;
                let v = self.expr(0)?;
                (self.peek()? == &Tok::RParen).then_some(())?;
                self.i += 1;
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_kernel_flag_expressions() {
        assert_eq!(
            eval("( unsigned long)(( gfp_t)((((1UL))) << (3)))"),
            Some(8)
        );
        assert_eq!(eval("(unsigned long)0x08u"), Some(8));
        assert_eq!(
            eval("(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11))))"),
            Some(0xc00)
        );
        assert_eq!(eval("((1UL) << (3)) & ~((1UL) << (3))"), Some(0));
        assert_eq!(eval("(1 <<"), None);
        assert_eq!(eval("((((((((((((("), None);
    }

    #[test]
    fn reads_bits_from_a_print_fmt_and_classifies() {
        let fmt = r#"print fmt: "gfp_flags=%s", (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {( unsigned long)(( gfp_t)((((1UL))) << (1))), "__GFP_HIGHMEM"}, {( unsigned long)(( gfp_t)((((1UL))) << (3))), "__GFP_MOVABLE"}, {( unsigned long)(( gfp_t)((((1UL))) << (7))), "__GFP_FS"}, {( unsigned long)(( gfp_t)((((1UL))) << (8))), "__GFP_ZERO"}, {( unsigned long)(( gfp_t)((((1UL))) << (12))), "__GFP_WRITE"}, {( unsigned long)(( gfp_t)((((1UL))) << (16))), "__GFP_NORETRY"}, { 0, ((void *)0) } ) : "none""#;
        let b = GfpBits::from_print_fmt(fmt).unwrap();
        assert_eq!(
            GfpBits {
                source: "tracepoint format",
                ..GfpBits::default()
            },
            b
        );
        // GFP_HIGHUSER_MOVABLE | __GFP_ZERO | __GFP_COMP (an anonymous fault)
        assert_eq!(b.classify(0x140cca | 0x100), GfpClass::UserAnon);
        // GFP_NOFS | HIGHMEM | MOVABLE | NOWARN | NORETRY | COMP | HARDWALL (readahead)
        assert_eq!(
            b.classify(0x0c40 | 0x2 | 0x8 | 0x2000 | 0x10000 | 0x40000 | 0x100000),
            GfpClass::PageCache
        );
        // GFP_HIGHUSER_MOVABLE | __GFP_WRITE (write_begin)
        assert_eq!(b.classify(0x100cca | 0x1000), GfpClass::PageCache);
        // GFP_KERNEL_ACCOUNT | __GFP_ZERO (a page table)
        assert_eq!(b.classify(0x400cc0 | 0x100), GfpClass::Kernel);
    }
}
