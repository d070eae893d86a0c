//! The harness's own resource usage (CPU time, peak RSS), recorded at a run's end so a report
//! shows what the measuring cost beside what it measured.

/// The harness's own CPU time (user + system, ms) and peak RSS (bytes); children not included.
pub fn self_usage() -> (u64, u64) {
    // SAFETY: getrusage fills the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    (
        ms(usage.ru_utime) + ms(usage.ru_stime),
        usage.ru_maxrss as u64 * 1024,
    )
}
