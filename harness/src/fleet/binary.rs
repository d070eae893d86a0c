//! The worker executable: finding `lease-worker`, and asking it its version (recorded with
//! every run beside the harness's own).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::history::Versions;

/// How long `WORKER-BIN --version` may take before it counts as failed.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The harness's own version, recorded with every run.
pub const HARNESS_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Finds `lease-worker`: `--worker-bin`, else beside the running executable (or one level up,
/// from a test binary in `deps/`). The error says how to build it.
pub fn resolve_worker_bin(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!("--worker-bin {}: no such file", path.display()))
        };
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the harness executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut candidates = vec![dir.join("lease-worker")];
    if dir.file_name().is_some_and(|n| n == "deps") {
        candidates.extend(dir.parent().map(|d| d.join("lease-worker")));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "the worker binary lease-worker was not found beside {} : build it with `cargo build --release -p lease-worker` \
             (or `cargo build -p lease-worker` for a debug harness), or pass --worker-bin PATH",
            exe.display()
        )
    })
}

/// The harness's version and the worker binary's `--version`. A worker that cannot say its
/// version does not stop the run: the reason is recorded instead.
pub async fn versions(worker_bin: &Path) -> Versions {
    let (worker, worker_error) = match worker_version(worker_bin).await {
        Ok(version) => (Some(version), None),
        Err(e) => (None, Some(e)),
    };
    Versions {
        harness: HARNESS_VERSION.to_string(),
        worker,
        worker_error,
        dynamodb: None,
    }
}

/// Runs `BIN --version` once (bounded by [`VERSION_TIMEOUT`]); the first line it printed, or
/// why not.
async fn worker_version(bin: &Path) -> Result<String, String> {
    const MAX_CHARS: usize = 200;
    let shown = format!("`{} --version`", bin.display());
    let clip = |text: &[u8]| -> String {
        let text = String::from_utf8_lossy(text);
        let line = text.lines().map(str::trim).find(|l| !l.is_empty());
        line.unwrap_or("").chars().take(MAX_CHARS).collect()
    };
    let output = tokio::process::Command::new(bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(VERSION_TIMEOUT, output)
        .await
        .map_err(|_| format!("{shown} did not finish within {VERSION_TIMEOUT:?}"))?
        .map_err(|e| format!("{shown} could not be run: {e}"))?;
    let stdout = clip(&output.stdout);
    if !output.status.success() {
        let stderr = clip(&output.stderr);
        let said = [stderr, stdout].into_iter().find(|t| !t.is_empty());
        return Err(match said {
            Some(said) => format!("{shown} failed ({}): {said}", output.status),
            None => format!("{shown} failed ({})", output.status),
        });
    }
    if stdout.is_empty() {
        return Err(format!("{shown} printed nothing"));
    }
    Ok(stdout)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_missing_worker_binary_says_how_to_build_it() {
        let err = resolve_worker_bin(Some(Path::new("/nonexistent/lease-worker"))).unwrap_err();
        assert!(err.contains("no such file"), "{err}");
    }

    /// An executable shell script in `dir`.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn the_worker_version_is_the_first_line_it_prints() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(
            dir.path(),
            "worker",
            r#"[ "$1" = --version ] || exit 9
    echo
    echo "lease-worker 9.8.7"
    echo "more detail""#,
        );
        let v = versions(&bin).await;
        assert_eq!(v.harness, env!("CARGO_PKG_VERSION"));
        assert_eq!(v.worker.as_deref(), Some("lease-worker 9.8.7"));
        assert_eq!(v.worker_error, None);
    }

    #[tokio::test]
    async fn a_worker_that_cannot_say_its_version_is_recorded_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(
            dir.path(),
            "old-worker",
            "echo \"error: unexpected argument '--version'\" >&2; exit 2",
        );
        let v = versions(&bin).await;
        assert_eq!(v.worker, None);
        let error = v.worker_error.unwrap();
        assert!(error.contains("old-worker --version"), "{error}");
        assert!(error.contains("exit status: 2"), "{error}");
        assert!(error.contains("unexpected argument '--version'"), "{error}");

        let v = versions(&dir.path().join("missing")).await;
        assert_eq!(v.worker, None);
        assert!(
            v.worker_error
                .as_deref()
                .unwrap()
                .contains("could not be run"),
            "{v:?}"
        );
        assert_eq!(v.harness, HARNESS_VERSION);
    }
}
