//! The DynamoDB Local java process: started in its own process group on a free loopback port,
//! with its output in a log file, and killed — group and all — when the guard drops, when the
//! thread that started it ends (`PR_SET_PDEATHSIG`), or when the parent dies.

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::ProvisionError;

pub(crate) struct JarProcess {
    child: Child,
    port: u16,
    log: PathBuf,
    killed: bool,
}

impl JarProcess {
    /// Starts `java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port P`
    /// in `dir`. `-sharedDb` makes every credential and region see one database (the harness and
    /// its workers must agree); `-disableTelemetry` keeps it off the network.
    pub(crate) fn spawn(
        java: &Path,
        dir: &Path,
        port: Option<u16>,
    ) -> Result<Self, ProvisionError> {
        let port = match port {
            Some(p) => {
                // Fail with a clear message now rather than with a Jetty stack trace later.
                TcpListener::bind(("127.0.0.1", p)).map_err(|_| ProvisionError::PortInUse(p))?;
                p
            }
            None => free_port()?,
        };
        let log =
            std::env::temp_dir().join(format!("dynamodb-local-{}-{port}.log", std::process::id()));
        let log_file = File::create(&log).map_err(|e| ProvisionError::Io {
            context: format!("creating {}", log.display()),
            source: e,
        })?;
        let log_err = log_file.try_clone().map_err(|e| ProvisionError::Io {
            context: format!("opening {}", log.display()),
            source: e,
        })?;
        let mut cmd = Command::new(java);
        cmd.current_dir(dir)
            .arg("-Djava.library.path=./DynamoDBLocal_lib")
            .arg("-Xss1m")
            .args([
                "-jar",
                crate::jar::JAR_NAME,
                "-inMemory",
                "-sharedDb",
                "-disableTelemetry",
            ])
            .arg("-port")
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .process_group(0);
        // SAFETY: prctl and getppid are async-signal-safe; nothing here allocates.
        unsafe {
            let parent = libc::getpid();
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| ProvisionError::JavaMissing {
            java: java.display().to_string(),
            source: e,
        })?;
        Ok(JarProcess {
            child,
            port,
            log,
            killed: false,
        })
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// `Some(status)` once the process has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// The last `n` lines of the process's log.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGKILLs the process group and reaps the child. An in-memory database has nothing to save.
    pub(crate) fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child's process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Drop for JarProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> Result<u16, ProvisionError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| ProvisionError::Io {
        context: "binding 127.0.0.1:0 to find a free port".to_string(),
        source: e,
    })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| ProvisionError::Io {
            context: "reading a free port".to_string(),
            source: e,
        })
}
