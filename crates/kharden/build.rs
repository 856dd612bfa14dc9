//! Embeds the machine library (`machines/*.toml`) and the experiment files
//! (`experiments/*.toml`) so the binary works from any directory.
use std::{env, fs, path::Path};

fn embed(dir: &Path, out: &Path, const_name: &str) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    // By name, so "xpfo" comes before "xpfo-v8" (by path, "-" sorts before ".toml").
    files.sort_by_key(|p| p.file_stem().map(|s| s.to_os_string()));
    let mut src =
        format!("/// (file stem, file text)\npub const {const_name}: &[(&str, &str)] = &[\n");
    for path in files {
        println!("cargo:rerun-if-changed={}", path.display());
        let stem = path.file_stem().unwrap().to_string_lossy();
        let abs = fs::canonicalize(&path).unwrap();
        src += &format!(
            "    ({stem:?}, include_str!({:?})),\n",
            abs.display().to_string()
        );
    }
    src += "];\n";
    fs::write(out, src).unwrap();
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Path::new(&env::var("OUT_DIR").unwrap()).to_path_buf();
    embed(
        &root.join("machines"),
        &out.join("machines.rs"),
        "MACHINE_FILES",
    );
    embed(
        &root.join("experiments"),
        &out.join("experiments.rs"),
        "EXPERIMENT_FILES",
    );
}
