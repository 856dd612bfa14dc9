//! A word shared with the driver's forked children: a zeroed anonymous page mapped
//! MAP_SHARED, which a fork does not copy, so what one side stores the other loads.

use std::sync::atomic::AtomicU64;

/// The shared page, unmapped when dropped.
pub struct SharedWord(*mut libc::c_void);

impl SharedWord {
    /// A fresh shared word, zero.
    pub fn new() -> std::io::Result<SharedWord> {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedWord(page))
    }
}

impl std::ops::Deref for SharedWord {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        // SAFETY: the page is mapped while self lives, zeroed and aligned for an AtomicU64.
        unsafe { &*(self.0 as *const AtomicU64) }
    }
}

impl Drop for SharedWord {
    fn drop(&mut self) {
        // SAFETY: self.0 is the page new() mapped, and no reference to it outlives self.
        unsafe { libc::munmap(self.0, 4096) };
    }
}

// SAFETY: the page holds one atomic word, which is made for sharing between threads.
unsafe impl Send for SharedWord {}
unsafe impl Sync for SharedWord {}
