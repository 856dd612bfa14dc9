//! `kharden kernel footprint data [PATH]`: the data lines each path touched on a traced kernel
//! (kernels/*-memtrace.toml, scripts/kernel_memtrace/) beside what the model touches: the
//! image, direct-map (heap) and stack lines it takes from the measurement, and the objects the
//! recording estimates from the source where the trace saw no direct-map line.
use kharden::kernel::footprints::image_data::{ImageData, LISTED_ELSEWHERE, REGIONS};
use kharden::kernel::paths::table::KernelPaths;
use kharden::report::table::Table;

/// Regions shown as columns (the rest are summed under "other regions").
const SHOWN: [&str; 8] = [
    "rodata",
    "data",
    "bss",
    "direct_map",
    "vmalloc",
    "vmemmap",
    "cpu_entry_area",
    "user",
];

pub fn show(paths: &KernelPaths, file: Option<&str>, path: Option<&str>) -> kharden::Result<()> {
    let d = ImageData::load(file)?;
    println!(
        "measured: kernel {} under qemu TCG, every data access of kernel code in the driver's windows (scale {}); model: kernel {}",
        d.kernel_release, d.scale, paths.kernel_release
    );
    if let Some(name) = path {
        return show_one(&d, paths, name);
    }
    let mut cols = vec!["path", "ops"];
    cols.extend(SHOWN);
    cols.extend([
        "other regions",
        "new/op",
        "model objects",
        "model image",
        "model heap",
        "heap pages",
    ]);
    let mut t = Table::new("", &cols);
    for (name, p) in &d.paths {
        let mut row = vec![name.clone(), p.ops.to_string()];
        let recurring = |r: &str| p.regions.get(r).map_or(0.0, |u| u.recurring);
        row.extend(SHOWN.iter().map(|r| format!("{:.0}", recurring(r))));
        let rest: f64 = REGIONS
            .iter()
            .filter(|r| !SHOWN.contains(r))
            .map(|r| recurring(r))
            .sum();
        let new: f64 = p.regions.values().map(|u| u.other_per_op).sum();
        row.extend([format!("{rest:.0}"), format!("{new:.1}")]);
        match paths.id(name).map(|id| paths.get(id)) {
            Some(k) => row.extend([
                k.data.iter().map(|d| d.1).sum::<u64>().to_string(),
                k.image_lines().to_string(),
                k.heap_lines().to_string(),
                k.heap_pages().to_string(),
            ]),
            None => row.extend(["-"; 4].map(String::from)),
        }
        t.push(row);
    }
    print!("{t}");
    println!(
        "region columns: lines touched by at least {:.0}% of a window's operations (median window); new/op: further distinct lines per operation, all regions",
        100.0 * d.recurring_share
    );
    println!(
        "model objects: the stack's measured lines, or the lines of the objects estimated from the source where the trace saw no direct-map line (kernel/paths/table.rs); image: the measured rodata, data and bss lines it runs; heap: the measured direct-map lines it runs, and their 4 KiB pages"
    );
    Ok(())
}

fn show_one(d: &ImageData, paths: &KernelPaths, name: &str) -> kharden::Result<()> {
    let p = d.path(name).ok_or_else(|| {
        let names: Vec<&str> = d.paths.keys().map(String::as_str).collect();
        kharden::Error::new(format!(
            "unknown path '{name}': expected one of {}",
            names.join(", ")
        ))
    })?;
    println!("{name}: {} operations in {} windows", p.ops, p.windows);
    let mut t = Table::new(
        "",
        &[
            "region",
            "recurring lines",
            "new lines/op",
            "reads/op",
            "writes/op",
        ],
    );
    for (region, u) in &p.regions {
        t.push(vec![
            region.clone(),
            format!("{:.0}", u.recurring),
            format!("{:.2}", u.other_per_op),
            format!("{:.1}", u.reads_per_op),
            format!("{:.1}", u.writes_per_op),
        ]);
    }
    print!("{t}");
    let listed = kharden::kernel::footprints::image_data::LISTED;
    for section in listed.into_iter().chain(LISTED_ELSEWHERE) {
        let lines: Vec<String> = p.lines(section).iter().map(|l| l.to_string()).collect();
        let unit = match section {
            "direct_map" => "guest physical address / 64",
            "stack" => "offset in the 16 KiB stack / 64",
            _ => "offset / 64",
        };
        println!("{section} lines ({unit}): {}", lines.join(" "));
    }
    if let Some(k) = paths.id(name).map(|id| paths.get(id)) {
        let objects: Vec<String> = k.data.iter().map(|(o, n)| format!("{o:?} {n}")).collect();
        println!(
            "model: objects {} (lines), image {} lines in {} pages, heap {} lines in {} pages",
            objects.join(", "),
            k.image_lines(),
            k.image.len(),
            k.heap_lines(),
            k.heap_pages()
        );
    }
    Ok(())
}
