//! Hardware cycle and instruction counts of the calling thread through perf_event_open(2),
//! so the native bench reads like `perf stat`. Absent (None) where perf events are not
//! permitted (perf_event_paranoid, containers) or not supported.

pub struct Counters {
    fds: [i32; 2],
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_RESET: libc::c_ulong = 0x2403;

fn open_one(config: u64) -> Option<i32> {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes) is enough for counting.
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&PERF_TYPE_HARDWARE.to_ne_bytes());
    attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&config.to_ne_bytes());
    // flags at offset 40: disabled (bit 0), exclude_kernel (bit 5), exclude_hv (bit 6)
    let flags: u64 = 1 | (1 << 5) | (1 << 6);
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            0 as libc::c_ulong,
        )
    };
    (fd >= 0).then_some(fd as i32)
}

impl Counters {
    pub fn open() -> Option<Counters> {
        let cycles = open_one(PERF_COUNT_HW_CPU_CYCLES)?;
        let Some(instructions) = open_one(PERF_COUNT_HW_INSTRUCTIONS) else {
            unsafe { libc::close(cycles) };
            return None;
        };
        Some(Counters {
            fds: [cycles, instructions],
        })
    }
    pub fn start(&self) {
        for fd in self.fds {
            unsafe {
                libc::ioctl(fd, IOC_RESET, 0);
                libc::ioctl(fd, IOC_ENABLE, 0);
            }
        }
    }
    /// (cycles, instructions) since start.
    pub fn stop(self) -> (Option<u64>, Option<u64>) {
        let mut vals = [None, None];
        for (k, fd) in self.fds.iter().enumerate() {
            let mut v = 0u64;
            unsafe {
                libc::ioctl(*fd, IOC_DISABLE, 0);
                if libc::read(*fd, &mut v as *mut u64 as *mut libc::c_void, 8) == 8 {
                    vals[k] = Some(v);
                }
            }
        }
        (vals[0], vals[1])
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        for fd in self.fds {
            unsafe { libc::close(fd) };
        }
    }
}
