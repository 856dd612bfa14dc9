//! Simulated physical memory. Only page-table pages have contents; data frames are just
//! numbers with a home NUMA node. Each node owns a fixed range of frame numbers: the lower
//! half for data frames, the upper half for page-table pages, so finding a table's
//! contents from its frame number is two subtractions, not a hash lookup.

use super::{Pfn, Pte};

/// Frames per node: 2^26 frames = 256 GiB of physical address space per node.
const NODE_FRAMES: u64 = 1 << 26;
const TABLE_OFFSET: u64 = NODE_FRAMES / 2;
/// Bytes of data frames a node can hand out (below its page-table frames).
pub const DATA_BYTES_PER_NODE: u64 = TABLE_OFFSET << 12;

pub type Table = [Pte; 512];

pub struct PhysMem {
    /// Page-table pages per node, indexed by (pfn - node base - TABLE_OFFSET).
    tables: Vec<Vec<Box<Table>>>,
    /// Next never-used data frame per node, and frames given back.
    next_data: Vec<u64>,
    free_data: Vec<Vec<Pfn>>,
    /// Page-table pages given back (free_table), reused before new ones.
    free_tables: Vec<Vec<Pfn>>,
}

impl PhysMem {
    pub fn new(nodes: u32) -> PhysMem {
        let n = nodes.max(1) as usize;
        PhysMem {
            tables: vec![Vec::new(); n],
            next_data: vec![0; n],
            free_data: vec![Vec::new(); n],
            free_tables: vec![Vec::new(); n],
        }
    }

    /// Every table's entries and the allocators' state.
    pub fn canon(&self, c: &mut crate::sim::Canon) {
        let PhysMem {
            tables,
            next_data,
            free_data,
            free_tables,
        } = self;
        for node in tables {
            c.word(node.len() as u64);
            for t in node {
                c.words(t.iter().map(|pte| pte.0));
            }
        }
        c.words(next_data.iter().copied());
        for free in free_data.iter().chain(free_tables) {
            c.word(free.len() as u64);
            c.words(free.iter().map(|p| p.0));
        }
    }

    pub fn nodes(&self) -> u32 {
        self.tables.len() as u32
    }

    /// The first physical address of `node`'s range.
    pub fn node_base(&self, node: u32) -> super::PhysAddr {
        Pfn(node as u64 * NODE_FRAMES).addr()
    }

    /// The NUMA node that holds `pfn`.
    pub fn node_of(&self, pfn: Pfn) -> u32 {
        (pfn.0 / NODE_FRAMES) as u32
    }

    /// Where the `struct page` of `pfn` lives, `bytes` to a frame: Linux's vmemmap keeps a
    /// node's struct pages on that node; here they fill the top of the node's range (at most
    /// 128 bytes for each of its 2^26 frames, 8 GiB), far above any page-table page the
    /// simulation allocates.
    pub fn struct_page_addr(pfn: Pfn, bytes: u64) -> super::PhysAddr {
        let (node, local) = (pfn.0 / NODE_FRAMES, pfn.0 % NODE_FRAMES);
        let vmemmap = (node + 1) * (NODE_FRAMES << 12) - NODE_FRAMES * bytes;
        super::PhysAddr(vmemmap + local * bytes)
    }

    /// A zeroed page-table page on `node`.
    pub fn alloc_table(&mut self, node: u32) -> Pfn {
        if let Some(pfn) = self.free_tables[node as usize].pop() {
            *self.table_mut(pfn) = [Pte::EMPTY; 512];
            return pfn;
        }
        let tables = &mut self.tables[node as usize];
        tables.push(Box::new([Pte::EMPTY; 512]));
        Pfn(node as u64 * NODE_FRAMES + TABLE_OFFSET + tables.len() as u64 - 1)
    }

    /// The page-table pages `node` has allocated so far, in allocation order (freed ones
    /// included).
    pub fn tables_allocated(&self, node: u32) -> impl Iterator<Item = Pfn> {
        let base = node as u64 * NODE_FRAMES + TABLE_OFFSET;
        (0..self.tables[node as usize].len() as u64).map(move |i| Pfn(base + i))
    }

    /// A data frame on `node` (reuses freed frames first, most recently freed first).
    pub fn alloc_data(&mut self, node: u32) -> Pfn {
        let n = node as usize;
        if let Some(pfn) = self.free_data[n].pop() {
            return pfn;
        }
        assert!(
            self.next_data[n] < TABLE_OFFSET,
            "node {node}: the simulation ran out of data frames (128 GiB per node)"
        );
        let pfn = Pfn(node as u64 * NODE_FRAMES + self.next_data[n]);
        self.next_data[n] += 1;
        pfn
    }

    /// Gives a page-table page back for reuse (kernel/memory/reap.rs; nothing else frees tables, so
    /// runs that never reap allocate exactly as before).
    pub fn free_table(&mut self, pfn: Pfn) {
        let node = self.node_of(pfn) as usize;
        self.free_tables[node].push(pfn);
    }

    pub fn free_data(&mut self, pfn: Pfn) {
        let node = self.node_of(pfn) as usize;
        self.free_data[node].push(pfn);
    }

    /// Contiguous, aligned data frames (for large pages and kernel images); not reusable.
    pub fn alloc_data_contiguous(&mut self, node: u32, frames: u64, align_frames: u64) -> Pfn {
        let n = node as usize;
        let start = self.next_data[n].next_multiple_of(align_frames);
        self.next_data[n] = start + frames;
        Pfn(node as u64 * NODE_FRAMES + start)
    }

    /// Bytes of `node`'s data frames handed out so far (from the node's base).
    pub fn data_bytes_used(&self, node: u32) -> u64 {
        self.next_data[node as usize] << 12
    }

    fn table_slot(&self, table: Pfn) -> (usize, usize) {
        let node = (table.0 / NODE_FRAMES) as usize;
        let idx = table.0 % NODE_FRAMES - TABLE_OFFSET;
        (node, idx as usize)
    }

    pub fn is_table(&self, pfn: Pfn) -> bool {
        let node = (pfn.0 / NODE_FRAMES) as usize;
        let off = pfn.0 % NODE_FRAMES;
        node < self.tables.len()
            && off >= TABLE_OFFSET
            && ((off - TABLE_OFFSET) as usize) < self.tables[node].len()
    }

    pub fn table(&self, table: Pfn) -> &Table {
        let (n, i) = self.table_slot(table);
        &self.tables[n][i]
    }

    pub fn table_mut(&mut self, table: Pfn) -> &mut Table {
        let (n, i) = self.table_slot(table);
        &mut self.tables[n][i]
    }

    pub fn read(&self, table: Pfn, index: usize) -> Pte {
        self.table(table)[index]
    }

    pub fn write(&mut self, table: Pfn, index: usize, pte: Pte) {
        self.table_mut(table)[index] = pte;
    }

    /// Number of page-table pages in use (all nodes).
    pub fn table_pages(&self) -> usize {
        self.tables.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn frames_know_their_node_and_tables_their_contents() {
        let mut m = PhysMem::new(2);
        let t = m.alloc_table(1);
        assert_eq!(m.node_of(t), 1);
        assert!(m.is_table(t));
        m.write(t, 3, Pte(0x1003));
        assert_eq!(m.read(t, 3), Pte(0x1003));
        let d = m.alloc_data(0);
        assert_eq!(m.node_of(d), 0);
        assert!(!m.is_table(d));
        m.free_data(d);
        assert_eq!(m.alloc_data(0), d);
    }
}
