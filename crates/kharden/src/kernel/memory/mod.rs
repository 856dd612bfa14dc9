//! Memory as the kernel manages it: its virtual layout (layout.rs), the page allocator and
//! the `struct page` lines it touches (page_alloc.rs, struct_page.rs), the direct map and
//! its splits (direct_map.rs), per-node page tables and text patching (numa.rs), and freeing
//! what dead tasks leave behind (reap.rs).

pub mod direct_map;
pub mod layout;
pub mod numa;
pub mod page_alloc;
pub mod reap;
pub mod struct_page;
