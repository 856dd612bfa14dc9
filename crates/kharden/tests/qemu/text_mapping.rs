//! How Linux maps its own image, measured on Debian's 6.1 kernel under qemu (QEMU's `info
//! tlb`, scripts/kernel_text_mapping/), against what the model's kernel assumes
//! (kernel/mod.rs `KernelGlobal`, `map_kernel_half`): text in 2 MiB pages; without PTI
//! everything global; with PTI chosen automatically on a CPU without PCID, text and the
//! 2 MiB-mapped rodata global (cloned into the user tables), data not; with pti=on only the
//! 2 MiB page of entry text; the cpu_entry_area global in every case. Needs
//! qemu-system-x86_64, Debian's linux-image-6.1.0-*-amd64 in /boot and busybox-static;
//! scripts/test.sh runs it where they are.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const M2: u64 = 2 << 20;
const CPU_ENTRY_AREA: u64 = 0xffff_fe00_0000_0000;

struct Booted {
    symbols: BTreeMap<String, u64>,
    /// Present leaves: virtual address -> (2 MiB page, global).
    leaves: BTreeMap<u64, (bool, bool)>,
    pti: bool,
}

fn boot(cpu: &str, args: &[&str]) -> Booted {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!(
        "kharden-textmap-{}-{cpu}{}",
        std::process::id(),
        args.join("-")
    ));
    let run = Command::new("bash")
        .arg(root.join("scripts/kernel_text_mapping/run.sh"))
        .arg(&out)
        .args(args)
        .env("CPU", cpu)
        .status()
        .expect("bash runs");
    assert!(run.success(), "run.sh failed");
    let console = std::fs::read_to_string(out.join("console.txt")).unwrap();
    let tlb = std::fs::read_to_string(out.join("tlb.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let mut symbols = BTreeMap::new();
    for line in console.lines() {
        if let Some(rest) = line.split("text-mapping-symbol: ").nth(1) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            symbols.insert(f[2].to_string(), u64::from_str_radix(f[0], 16).unwrap());
        }
    }
    let mut leaves = BTreeMap::new();
    for line in tlb.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [va, _pa, flags] = f[..] {
            let va = u64::from_str_radix(va.trim_end_matches(':'), 16).unwrap();
            let b = flags.as_bytes();
            leaves.insert(va, (b[2] == b'P', b[1] == b'G'));
        }
    }
    let pti = console.contains("page tables isolation: enabled");
    Booted {
        symbols,
        leaves,
        pti,
    }
}

impl Booted {
    fn sym(&self, name: &str) -> u64 {
        self.symbols[name]
    }

    /// (bytes in 2 MiB leaves, bytes in global leaves) of [lo, hi).
    fn cover(&self, lo: u64, hi: u64) -> (u64, u64) {
        let (mut large, mut global) = (0, 0);
        for (&va, &(is_2m, g)) in self.leaves.range(lo.saturating_sub(M2)..hi) {
            let size = if is_2m { M2 } else { 4096 };
            let overlap = (hi.min(va + size)).saturating_sub(lo.max(va));
            large += if is_2m { overlap } else { 0 };
            global += if g { overlap } else { 0 };
        }
        (large, global)
    }

    /// The 2 MiB text pages with the global bit.
    fn global_text_pages(&self) -> Vec<u64> {
        let (lo, hi) = (self.sym("_text"), self.sym("_etext"));
        self.leaves
            .range(lo..hi)
            .filter(|(_, &(is_2m, g))| is_2m && g)
            .map(|(&va, _)| va)
            .collect()
    }

    fn cpu_entry_area_global(&self) -> bool {
        let cea: Vec<bool> = self
            .leaves
            .range(CPU_ENTRY_AREA..CPU_ENTRY_AREA + (1 << 39))
            .map(|(_, &(_, g))| g)
            .collect();
        !cea.is_empty() && cea.iter().all(|&g| g)
    }
}

#[test]
#[ignore = "needs qemu-system-x86_64, Debian's linux-image-6.1.0-*-amd64 in /boot and busybox-static (about 30 s)"]
fn qemu_linux_maps_its_image_as_the_model_assumes() {
    // A CPU without PCID that Linux deems vulnerable to Meltdown: PTI on, chosen
    // automatically; and the same with pti=on. The two guests boot side by side.
    let (auto, forced) = std::thread::scope(|s| {
        let forced = s.spawn(|| boot("Nehalem", &["pti=on"]));
        (
            boot("Nehalem", &[]),
            forced.join().expect("the pti=on boot"),
        )
    });
    assert!(auto.pti, "PTI should be on by default on a Nehalem");
    let (text, etext) = (auto.sym("_text"), auto.sym("_etext"));
    let (large, global) = auto.cover(text, etext);
    assert!(
        large as f64 >= 0.99 * (etext - text) as f64,
        "text in 2 MiB pages: {large} of {}",
        etext - text
    );
    assert_eq!(global, etext - text, "all text is global");
    let (ro, ro_end) = (auto.sym("__start_rodata"), auto.sym("__end_rodata"));
    let (ro_large, ro_global) = auto.cover(ro, ro_end);
    assert_eq!(
        ro_global, ro_large,
        "rodata's 2 MiB pages, and only they, are global"
    );
    let (data, data_end) = (auto.sym("_sdata"), auto.sym("_edata"));
    assert_eq!(auto.cover(data, data_end).1, 0, "data is not global");
    assert!(auto.cpu_entry_area_global());

    assert!(forced.pti);
    let entry = forced.sym("__entry_text_start") & !(M2 - 1);
    assert_eq!(
        forced.global_text_pages(),
        [entry],
        "only the entry text's page"
    );
    assert_eq!(forced.cover(ro, ro_end).1, 0, "rodata is not global");
    assert!(forced.cpu_entry_area_global());
}
