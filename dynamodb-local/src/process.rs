//! A local server process (DynamoDB Local's java, moto's python): started in its own process
//! group on a loopback port, with its output in a log file, and killed — group and all — when the
//! guard drops, when the thread that started it ends (`PR_SET_PDEATHSIG`), or when the parent dies.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ProvisionError;

/// Which server a process runs; names it in messages and log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// DynamoDB Local (the jar or a container).
    Jar,
    /// moto's server.
    Moto,
    /// An endpoint someone else runs.
    External,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Server {
    /// The server's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Server::Jar => "DynamoDB Local",
            Server::Moto => "moto",
            Server::External => "DynamoDB endpoint",
        }
    }

    fn file_stem(self) -> &'static str {
        match self {
            Server::Jar => "dynamodb-local",
            Server::Moto | Server::External => "moto",
        }
    }
}

pub(crate) struct ServerProcess {
    server: Server,
    child: Child,
    port: u16,
    log: PathBuf,
    killed: bool,
}

impl ServerProcess {
    /// Starts `java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port P`
    /// in `dir`. `-sharedDb` makes every credential and region see one database (the harness and
    /// its workers must agree); `-disableTelemetry` keeps it off the network.
    pub(crate) fn spawn_jar(
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
        let log = log_path(Server::Jar, &port.to_string());
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
            .arg(port.to_string());
        let (log_out, log_err) = log_files(&log)?;
        cmd.stdout(log_out).stderr(log_err);
        let child = spawn_guarded(cmd).map_err(|e| ProvisionError::JavaMissing {
            java: java.display().to_string(),
            source: e,
        })?;
        Ok(ServerProcess {
            server: Server::Jar,
            child,
            port,
            log,
            killed: false,
        })
    }

    /// Starts moto's server through `serve.py` with the venv's `python`. It binds the port itself
    /// (0 = any free one: no window in which another process can take it) and prints it on its
    /// first line of stdout; this waits for that line at most `timeout`.
    pub(crate) fn spawn_moto(
        python: &Path,
        port: Option<u16>,
        timeout: Duration,
    ) -> Result<Self, ProvisionError> {
        if let Some(p) = port {
            TcpListener::bind(("127.0.0.1", p)).map_err(|_| ProvisionError::PortInUse(p))?;
        }
        let log = log_path(Server::Moto, &crate::jar::unique().to_string());
        let (_, log_err) = log_files(&log)?;
        let mut cmd = Command::new(python);
        cmd.arg("-c")
            .arg(crate::moto::SERVE_PY)
            .arg(port.unwrap_or(0).to_string())
            // Bytecode stays out of the shared cached venv; nothing buffers the port line.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .stdout(Stdio::piped())
            .stderr(log_err);
        let mut child = spawn_guarded(cmd).map_err(|e| ProvisionError::MotoUnavailable {
            reason: format!("could not run {}: {e}", python.display()),
            cache: crate::moto::default_cache_dir().display().to_string(),
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut proc = ServerProcess {
            server: Server::Moto,
            child,
            port: 0,
            log,
            killed: false,
        };
        let line = rx.recv_timeout(timeout).unwrap_or_default();
        match line.trim().parse::<u16>() {
            Ok(p) if p > 0 => {
                proc.port = p;
                Ok(proc)
            }
            _ => {
                // Give a dying process a moment so the error can say how it ended.
                std::thread::sleep(Duration::from_millis(200));
                let status = proc
                    .exited()
                    .unwrap_or_else(|| format!("no port printed within {timeout:?}"));
                Err(ProvisionError::ExitedEarly {
                    server: Server::Moto,
                    pid: proc.pid(),
                    status,
                    log: proc.log.display().to_string(),
                    tail: proc.log_tail(20),
                })
            }
        }
    }

    pub(crate) fn server(&self) -> Server {
        self.server
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

    /// SIGKILLs the process group and reaps the child. Both servers keep everything in memory:
    /// there is nothing to save.
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

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_path(server: Server, tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{}-{}-{tag}.log",
        server.file_stem(),
        std::process::id()
    ))
}

fn log_files(log: &Path) -> Result<(File, File), ProvisionError> {
    let out = File::create(log).map_err(|e| ProvisionError::Io {
        context: format!("creating {}", log.display()),
        source: e,
    })?;
    let err = out.try_clone().map_err(|e| ProvisionError::Io {
        context: format!("opening {}", log.display()),
        source: e,
    })?;
    Ok((out, err))
}

/// Spawns `cmd` with no stdin, in its own process group, and with SIGKILL as its parent-death
/// signal (so a harness that dies without unwinding leaves no server behind).
fn spawn_guarded(mut cmd: Command) -> std::io::Result<Child> {
    cmd.stdin(Stdio::null()).process_group(0);
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
    cmd.spawn()
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
