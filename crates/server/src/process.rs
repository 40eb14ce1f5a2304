//! Process figures from /proc for INFO (memory, cpu).

use lattice_node::ProcessStats;

/// Clock ticks per second for /proc/self/stat's utime/stime; 100 on every Linux we target.
const CLOCK_TICKS_PER_SEC: u64 = 100;

pub fn read(port: u16) -> ProcessStats {
    let page = 4096u64;
    let rss_bytes = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page);
    let (cpu_user_us, cpu_sys_us) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; utime and stime are 14th and 15th.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: u64 = f.get(11)?.parse().ok()?;
            let st: u64 = f.get(12)?.parse().ok()?;
            Some((
                ut * 1_000_000 / CLOCK_TICKS_PER_SEC,
                st * 1_000_000 / CLOCK_TICKS_PER_SEC,
            ))
        })
        .unwrap_or((0, 0));
    ProcessStats {
        used_memory_bytes: crate::alloc::allocated_bytes(),
        rss_bytes,
        cpu_user_us,
        cpu_sys_us,
        process_id: std::process::id() as u64,
        tcp_port: port as u64,
        host_lock_longest_hold_us: 0,
    }
}
