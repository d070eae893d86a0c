//! moto's server mode (Apache-2.0), the open-source DynamoDB-compatible backend: installed at run
//! time with pip from PyPI into a per-user cached venv (every package pinned in
//! `moto/requirements.txt`, never vendored), and run through `moto/serve.py`, which serialises
//! requests so that conditional writes stay linearizable (stock `moto_server` does not).
//!
//! Where the venv comes from, in order: a venv the user names (`MOTO_VENV`), the cache, else a new
//! one built in a scratch directory and renamed into the cache, so concurrent tests never see a
//! half-installed venv.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::jar::{io, scratch_beside};
use crate::ProvisionError;

/// The moto release installed.
pub const MOTO_VERSION: &str = "5.2.5";
/// moto's licence, for reports and the README.
pub const MOTO_LICENSE: &str = "Apache-2.0";
/// The pinned requirements installed into the venv.
pub const REQUIREMENTS: &str = include_str!("moto/requirements.txt");
/// The server script run with the venv's python (`python -c SERVE_PY PORT`).
pub const SERVE_PY: &str = include_str!("moto/serve.py");
/// Environment variable naming a venv (or any Python prefix) that already has moto installed.
pub const ENV_MOTO_VENV: &str = "MOTO_VENV";
/// Environment variable naming the Python used to create the venv (default `python3`).
pub const ENV_MOTO_PYTHON: &str = "MOTO_PYTHON";

/// Where moto's venv comes from, and how to build it.
#[derive(Debug, Clone)]
pub struct MotoSource {
    /// A venv with moto installed (`MOTO_VENV`); used as is.
    pub venv: Option<PathBuf>,
    /// The cached venv for these pins (`…/lease-failover/moto-5.2.5-<hash of the pins>`).
    pub cache: PathBuf,
    /// The Python that creates the venv; `None` disables installing.
    pub python: Option<PathBuf>,
}

impl MotoSource {
    /// The default source: `MOTO_VENV`, then the user cache, then a fresh install with
    /// `MOTO_PYTHON` (default `python3`).
    pub fn from_env() -> Self {
        MotoSource {
            venv: std::env::var_os(ENV_MOTO_VENV)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
            cache: default_cache_dir(),
            python: Some(
                std::env::var_os(ENV_MOTO_PYTHON)
                    .filter(|p| !p.is_empty())
                    .map_or_else(|| PathBuf::from("python3"), PathBuf::from),
            ),
        }
    }

    /// Returns the `python` of a venv that has moto installed, installing it into the cache if
    /// needed (about half a minute and 140 MB, once per machine).
    pub fn resolve(&self) -> Result<PathBuf, ProvisionError> {
        if let Some(venv) = &self.venv {
            let python = venv_python(venv);
            return if python.is_file() {
                Ok(python)
            } else {
                Err(self.unavailable(format!(
                    "{} has no bin/python (from {ENV_MOTO_VENV})",
                    venv.display()
                )))
            };
        }
        let cached = venv_python(&self.cache);
        if cached.is_file() {
            return Ok(cached);
        }
        match &self.python {
            Some(python) => self.install(python),
            None => Err(self.unavailable(format!(
                "{} is not installed and installing is disabled",
                self.cache.display()
            ))),
        }
    }

    fn unavailable(&self, reason: String) -> ProvisionError {
        ProvisionError::MotoUnavailable {
            reason,
            cache: self.cache.display().to_string(),
        }
    }

    /// `python -m venv` in a scratch directory beside the cache, `pip install -r` the pins,
    /// check that moto imports, rename into place.
    fn install(&self, python: &Path) -> Result<PathBuf, ProvisionError> {
        let (scratch, _cleanup) = scratch_beside(&self.cache, "install-moto")?;
        eprintln!(
            "dynamodb-local: installing moto {MOTO_VERSION} ({MOTO_LICENSE}) from PyPI into {} (once per machine)",
            self.cache.display()
        );
        let venv = scratch.join("venv");
        self.run(
            Command::new(python).args(["-m", "venv"]).arg(&venv),
            "python -m venv",
        )?;
        let requirements = scratch.join("requirements.txt");
        std::fs::write(&requirements, REQUIREMENTS)
            .map_err(|e| io(format!("writing {}", requirements.display()), e))?;
        let venv_py = venv_python(&venv);
        self.run(
            Command::new(&venv_py)
                .args(["-m", "pip", "install", "--quiet", "--no-input"])
                .args(["--disable-pip-version-check", "-r"])
                .arg(&requirements),
            "pip install -r requirements.txt",
        )?;
        self.run(
            Command::new(&venv_py).args([
                "-c",
                &format!("import moto, sys; sys.exit(moto.__version__ != {MOTO_VERSION:?})"),
            ]),
            "import moto",
        )?;
        match std::fs::rename(&venv, &self.cache) {
            Ok(()) => {}
            // Another process won the race and put a complete venv there: use theirs.
            Err(_) if venv_python(&self.cache).is_file() => {}
            Err(e) => {
                return Err(io(
                    format!("moving the venv into {}", self.cache.display()),
                    e,
                ))
            }
        }
        Ok(venv_python(&self.cache))
    }

    fn run(&self, cmd: &mut Command, what: &str) -> Result<(), ProvisionError> {
        let out = cmd
            .output()
            .map_err(|e| self.unavailable(format!("could not run `{what}`: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        Err(self.unavailable(format!(
            "`{what}` failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )))
    }
}

/// A venv's interpreter. A venv found through its `bin/python` keeps working after a rename
/// (Python finds `pyvenv.cfg` beside it), unlike its scripts, whose shebangs name the old path.
fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// `…/lease-failover/moto-<version>-<first 8 hex of the pins' SHA-256>` in the user cache.
pub fn default_cache_dir() -> PathBuf {
    let digest = hex::encode(Sha256::digest(REQUIREMENTS.as_bytes()));
    crate::jar::cache_root().join(format!("moto-{MOTO_VERSION}-{}", &digest[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_requirement_is_pinned_and_moto_is_the_named_version() {
        let pins: Vec<&str> = REQUIREMENTS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert!(pins.iter().all(|l| l.contains("==")), "{pins:?}");
        assert!(pins.contains(&format!("moto=={MOTO_VERSION}").as_str()));
    }

    #[test]
    fn cache_name_follows_the_pins() {
        let name = default_cache_dir();
        let name = name.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(&format!("moto-{MOTO_VERSION}-")), "{name}");
        assert_eq!(name.len(), "moto-".len() + MOTO_VERSION.len() + 1 + 8);
    }

    #[test]
    fn a_named_venv_without_python_is_a_clear_error() {
        let source = MotoSource {
            venv: Some(PathBuf::from("/nonexistent/venv")),
            cache: PathBuf::from("/nonexistent/cache"),
            python: None,
        };
        let err = source.resolve().unwrap_err().to_string();
        assert!(
            err.contains("/nonexistent/venv") && err.contains(ENV_MOTO_VENV),
            "{err}"
        );
    }
}
