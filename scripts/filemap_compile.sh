# Sourced by the scripts that measure the compile job's user code (user_cache_rates.sh,
# user_pages/run.sh): filemap_compile TREE unpacks Debian's linux-source-6.1 into TREE if it
# is not there, configures it (x86_64 defconfig), cds into it and sets `cmd` to the command
# kbuild runs for mm/filemap.o, with -S instead of -c: cc1 alone does the work.
filemap_compile() {
    local tree=$1
    if [ ! -d "$tree" ]; then
        mkdir -p "$(dirname "$tree")"
        tar -C "$(dirname "$tree")" -xJf /usr/src/linux-source-6.1.tar.xz
    fi
    cd "$tree"
    [ -f .config ] || make -s defconfig
    make -s -j"$(nproc)" prepare
    rm -f mm/filemap.o
    cmd=$(make V=1 mm/filemap.o 2>&1 | grep -E '^ *gcc .*-c -o mm/filemap.o' | head -1 |
        sed 's/^ *//; s/ ; .*//; s/ -c -o mm\/filemap.o / -S -o \/tmp\/filemap.s /')
}
