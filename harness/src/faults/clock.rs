//! Clock faults: a worker's wall clock offset from its start (`clock`) and jumped mid-run
//! (`clock_step`), through libfaketime (Debian package `faketime`) preloaded into the worker.
//!
//! Each such worker reads its offset from its own timestamp file with caching off
//! (`FAKETIME_NO_CACHE=1`), so a step written by the harness (atomically, by rename) holds from
//! the worker's next clock read. Only the wall clock moves: `FAKETIME_DONT_FAKE_MONOTONIC=1`
//! leaves `CLOCK_MONOTONIC` (Rust's `Instant`, tokio's timers) real. Measured on a shared
//! 2-core machine: a faked `CLOCK_REALTIME` read costs about 7.7 µs (the file is re-read)
//! instead of about 0.2 µs; monotonic reads cost what they did. Workers of a scenario without
//! clock faults are started without libfaketime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::fleet::SpawnHook;

/// Where Debian and others install libfaketime; the thread-safe variant first (the worker is
/// multi-threaded).
const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
];
/// Overrides the search (a path to `libfaketime.so.1`).
pub const LIBFAKETIME_ENV: &str = "HARNESS_LIBFAKETIME";

/// The libfaketime library, or a message saying how to install it.
pub fn find_libfaketime() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var(LIBFAKETIME_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{LIBFAKETIME_ENV}={}: no such file",
                path.display()
            ))
        };
    }
    LIBFAKETIME_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "clock faults need libfaketime, which is not installed: `apt-get install faketime` \
                 (Debian/Ubuntu), or set {LIBFAKETIME_ENV} to its libfaketime.so.1 (looked in {})",
                LIBFAKETIME_PATHS.join(", ")
            )
        })
}

/// The faked clocks of a run's workers.
#[derive(Debug)]
pub struct Clocks {
    lib: PathBuf,
    dir: PathBuf,
    /// Offsets from the start, by worker name; `"*"` for every worker.
    initial: BTreeMap<String, i64>,
    offsets: Mutex<BTreeMap<String, i64>>,
}

/// Key of an offset every worker starts with.
pub const EVERY_WORKER: &str = "*";

impl Clocks {
    /// Clocks with timestamp files in `dir`; `initial` maps a worker (or [`EVERY_WORKER`]) to
    /// the offset it starts with.
    pub fn new(lib: PathBuf, dir: &Path, initial: BTreeMap<String, i64>) -> Clocks {
        Clocks {
            lib,
            dir: dir.to_path_buf(),
            initial,
            offsets: Mutex::new(BTreeMap::new()),
        }
    }

    /// The offset `worker`'s wall clock runs at now, in ms.
    pub fn offset(&self, worker: &str) -> Option<i64> {
        self.offsets
            .lock()
            .expect("clock lock")
            .get(worker)
            .copied()
    }

    /// Jumps `worker`'s wall clock by `step_ms`; returns the new offset.
    pub fn step(&self, worker: &str, step_ms: i64) -> anyhow::Result<i64> {
        let mut offsets = self.offsets.lock().expect("clock lock");
        let Some(offset) = offsets.get_mut(worker) else {
            anyhow::bail!("{worker} was not started under libfaketime");
        };
        *offset += step_ms;
        write_offset(&self.file(worker), *offset)?;
        Ok(*offset)
    }

    fn file(&self, worker: &str) -> PathBuf {
        self.dir.join(format!("{worker}.faketime"))
    }
}

/// Writes an offset as libfaketime reads it (`+4.500` seconds), atomically.
pub fn write_offset(file: &Path, offset_ms: i64) -> anyhow::Result<()> {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    let text = format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000);
    let tmp = file.with_extension("faketime.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| anyhow::anyhow!("writing the clock offset {}: {e}", file.display()))
}

/// The environment that runs a process under libfaketime reading `file`, monotonic untouched.
pub fn faketime_env(lib: &Path, file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

impl SpawnHook for Clocks {
    fn env(&self, worker: &str) -> anyhow::Result<Vec<(String, String)>> {
        let offset = self
            .initial
            .get(worker)
            .or_else(|| self.initial.get(EVERY_WORKER))
            .copied()
            .unwrap_or(0);
        let file = self.file(worker);
        write_offset(&file, offset)?;
        self.offsets
            .lock()
            .expect("clock lock")
            .insert(worker.to_string(), offset);
        Ok(faketime_env(&self.lib, &file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_written_as_libfaketime_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("w.faketime");
        write_offset(&file, -4000).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "-4.000\n");
        write_offset(&file, 1250).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "+1.250\n");
        write_offset(&file, 0).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "+0.000\n");
    }
}
