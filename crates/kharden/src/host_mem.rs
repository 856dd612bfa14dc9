//! Memory of this host's own for native measurements (machine detect, evict-fault).

/// Anonymous private mapping; released on drop.
pub(crate) struct Map {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}
impl Map {
    pub(crate) fn new(len: usize, huge: bool) -> Option<Map> {
        // SAFETY: a fresh anonymous mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on our own mapping; failure only loses the hint.
        unsafe {
            libc::madvise(
                p,
                len,
                if huge {
                    libc::MADV_HUGEPAGE
                } else {
                    libc::MADV_NOHUGEPAGE
                },
            )
        };
        Some(Map {
            ptr: p as *mut u8,
            len,
        })
    }
}
impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
