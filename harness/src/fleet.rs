//! The fleet: real `lease-worker` OS processes, one per `worker-N`, each in its own process
//! group with its log in `DIR/workers/worker-N.log`.
//!
//! No worker may outlive the harness. Three layers make sure of it: a guard that SIGKILLs every
//! live group when the [`Fleet`] is dropped (normal end, error, Ctrl-C, panic unwinding);
//! `PR_SET_PDEATHSIG = SIGKILL` set in the child before `exec`, so the kernel kills it if the
//! harness itself is SIGKILLed; and `kill_on_drop` on the child handles.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_protocol::settings;
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::history::{Record, Recorder, WorkerExit, WorkerStart};
use crate::worker_id::worker_name;

mod binary;
mod config;

pub use binary::{resolve_worker_bin, versions, HARNESS_VERSION};
pub use config::{managed_env, FleetConfig, SpawnHook, WorkerEnv};

/// Where a worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    /// SIGSTOPped; SIGCONT makes it `Running` again.
    Paused,
    /// SIGTERM sent; draining.
    Stopping,
    Exited,
}

struct Worker {
    name: String,
    pid: i32,
    state: State,
    exited: watch::Receiver<bool>,
    addr_file: PathBuf,
}

/// Process groups still alive; SIGKILLed when the last handle is dropped.
#[derive(Default)]
struct GroupGuard {
    groups: Mutex<HashSet<i32>>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let groups = self.groups.get_mut().map(|g| g.clone()).unwrap_or_default();
        for pgid in groups {
            // SAFETY: kill(2) with a negative pid signals a process group we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

struct Inner {
    workers: BTreeMap<usize, Worker>,
    next: usize,
}

/// The running workers. Cheap to clone; every clone controls the same processes.
#[derive(Clone)]
pub struct Fleet {
    config: Arc<FleetConfig>,
    inner: Arc<Mutex<Inner>>,
    guard: Arc<GroupGuard>,
    recorder: Recorder,
}

impl Fleet {
    /// An empty fleet.
    pub fn new(config: FleetConfig, recorder: Recorder) -> Fleet {
        Fleet {
            config: Arc::new(config),
            inner: Arc::new(Mutex::new(Inner {
                workers: BTreeMap::new(),
                next: 1,
            })),
            guard: Arc::new(GroupGuard::default()),
            recorder,
        }
    }

    /// Starts the next worker (`worker-N`, N counting from 1) and returns its name.
    pub fn spawn(&self) -> anyhow::Result<String> {
        let n = {
            let mut inner = self.inner.lock().expect("fleet lock poisoned");
            inner.next += 1;
            inner.next - 1
        };
        let name = worker_name(n);
        let log_path = self.config.dir.join(format!("{name}.log"));
        let addr_file = self.config.dir.join(format!("{name}.addr"));
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::File::create(&log_path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", log_path.display()))?;
        let mut cmd = Command::new(&self.config.bin);
        cmd.args(&self.config.args);
        for var in managed_env() {
            cmd.env_remove(var);
        }
        cmd.env(settings::OWNER_ID, &name)
            .env(settings::METRICS_ADDR, "127.0.0.1:0")
            .env(settings::METRICS_ADDR_FILE, &addr_file)
            .envs(&self.config.env);
        if let Some(extra) = self.config.worker_env.get(&name) {
            cmd.envs(extra);
        }
        for hook in &self.config.hooks {
            cmd.envs(hook.env(&name)?);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let parent = std::process::id() as i32;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The harness died between fork and prctl: do not run orphaned.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            anyhow::anyhow!("cannot start {} as {name}: {e}", self.config.bin.display())
        })?;
        let pid = child.id().expect("a just-spawned child has a pid") as i32;
        self.guard
            .groups
            .lock()
            .expect("guard lock poisoned")
            .insert(pid);
        self.recorder.record(Record::WorkerStart(WorkerStart {
            t_ms: self.recorder.now_ms(),
            worker: name.clone(),
            pid: pid as u32,
        }));
        let (exited_tx, exited) = watch::channel(false);
        self.inner
            .lock()
            .expect("fleet lock poisoned")
            .workers
            .insert(
                n,
                Worker {
                    name: name.clone(),
                    pid,
                    state: State::Running,
                    exited,
                    addr_file,
                },
            );
        // The waiting task holds the state and the recorder, never the guard: the guard must
        // drop with the last `Fleet` handle even while children still run.
        let inner = self.inner.clone();
        let recorder = self.recorder.clone();
        let worker = name.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            let (code, signal) = match &status {
                Ok(s) => (s.code(), s.signal()),
                Err(_) => (None, None),
            };
            recorder.record(Record::WorkerExit(WorkerExit {
                t_ms: recorder.now_ms(),
                worker: worker.clone(),
                code,
                signal,
            }));
            if let Some(w) = inner
                .lock()
                .expect("fleet lock poisoned")
                .workers
                .get_mut(&n)
            {
                w.state = State::Exited;
            }
            let _ = exited_tx.send(true);
        });
        Ok(name)
    }

    /// The worker's pid (also its process group id).
    pub fn pid(&self, name: &str) -> Option<i32> {
        let inner = self.inner.lock().expect("fleet lock poisoned");
        inner
            .workers
            .values()
            .find(|w| w.name == name)
            .map(|w| w.pid)
    }

    /// SIGKILLs every process group at once (the guard does the same on drop).
    pub fn kill_all(&self) {
        let groups = self
            .guard
            .groups
            .lock()
            .expect("guard lock poisoned")
            .clone();
        for pgid in groups {
            // SAFETY: kill(2) on a process group this fleet created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }

    /// The state of `name`, if it was ever started.
    pub fn state(&self, name: &str) -> Option<State> {
        let inner = self.inner.lock().expect("fleet lock poisoned");
        inner
            .workers
            .values()
            .find(|w| w.name == name)
            .map(|w| w.state)
    }

    /// Names of workers in `state`, in start order.
    pub fn in_state(&self, state: State) -> Vec<String> {
        let inner = self.inner.lock().expect("fleet lock poisoned");
        inner
            .workers
            .values()
            .filter(|w| w.state == state)
            .map(|w| w.name.clone())
            .collect()
    }

    /// Names of workers not yet exited (running, paused or stopping), in start order.
    pub fn alive(&self) -> Vec<String> {
        let inner = self.inner.lock().expect("fleet lock poisoned");
        inner
            .workers
            .values()
            .filter(|w| w.state != State::Exited)
            .map(|w| w.name.clone())
            .collect()
    }

    /// Sends `signal` to the worker's process group and updates its state. False when the
    /// worker is unknown or already exited.
    pub fn signal(&self, name: &str, signal: i32) -> bool {
        let mut inner = self.inner.lock().expect("fleet lock poisoned");
        let Some(w) = inner.workers.values_mut().find(|w| w.name == name) else {
            return false;
        };
        if w.state == State::Exited {
            return false;
        }
        // SAFETY: kill(2) on the process group this fleet created.
        unsafe { libc::kill(-w.pid, signal) };
        w.state = match signal {
            libc::SIGSTOP => State::Paused,
            libc::SIGCONT if w.state == State::Paused => State::Running,
            libc::SIGTERM => State::Stopping,
            _ => w.state,
        };
        true
    }

    /// Waits until the worker exits; false if it is still alive after `limit`.
    pub async fn wait_exit(&self, name: &str, limit: Duration) -> bool {
        let rx = {
            let inner = self.inner.lock().expect("fleet lock poisoned");
            match inner.workers.values().find(|w| w.name == name) {
                Some(w) => w.exited.clone(),
                None => return true,
            }
        };
        let mut rx = rx;
        let exited = tokio::time::timeout(limit, rx.wait_for(|e| *e))
            .await
            .is_ok();
        exited
    }

    /// Waits until the worker's `/readyz` answers 200, within `limit`.
    pub async fn wait_ready(&self, name: &str, limit: Duration) -> anyhow::Result<SocketAddr> {
        let deadline = Instant::now() + limit;
        let addr_file = {
            let inner = self.inner.lock().expect("fleet lock poisoned");
            inner
                .workers
                .values()
                .find(|w| w.name == name)
                .map(|w| w.addr_file.clone())
                .ok_or_else(|| anyhow::anyhow!("no worker named {name}"))?
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let mut addr: Option<SocketAddr> = None;
        loop {
            if self.state(name) == Some(State::Exited) {
                anyhow::bail!(
                    "{name} exited before it became ready; see its log in {}",
                    self.config.dir.display()
                );
            }
            if addr.is_none() {
                addr = std::fs::read_to_string(&addr_file)
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
            }
            if let Some(a) = addr {
                let ok = client
                    .get(format!("http://{a}/readyz"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    return Ok(a);
                }
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{name} was not ready (/readyz) within {:?}; see {}",
                    limit,
                    self.config.dir.join(format!("{name}.log")).display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends every worker: SIGCONT the paused, SIGTERM all, SIGKILL what is left after `grace`.
    /// Returns the names that had to be killed.
    pub async fn shutdown(&self, grace: Duration) -> Vec<String> {
        for name in self.in_state(State::Paused) {
            self.signal(&name, libc::SIGCONT);
        }
        let alive = self.alive();
        for name in &alive {
            self.signal(name, libc::SIGTERM);
        }
        let mut killed = Vec::new();
        let waits = alive.iter().map(|n| self.wait_exit(n, grace));
        let results = futures_util::future::join_all(waits).await;
        for (name, exited) in alive.iter().zip(results) {
            if !exited {
                self.signal(name, libc::SIGKILL);
                killed.push(name.clone());
            }
        }
        for name in &killed {
            self.wait_exit(name, Duration::from_secs(5)).await;
        }
        killed
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::history::HistoryWriter;

    fn fleet_of(bin: &str, dir: &Path, recorder: Recorder) -> Fleet {
        Fleet::new(
            FleetConfig {
                bin: PathBuf::from(bin),
                dir: dir.to_path_buf(),
                env: BTreeMap::new(),
                worker_env: BTreeMap::new(),
                args: vec!["30".into()],
                hooks: Vec::new(),
            },
            recorder,
        )
    }

    fn is_alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[tokio::test]
    async fn workers_are_signalled_and_killed_when_the_fleet_drops() {
        let dir = tempfile::tempdir().unwrap();
        let writer = HistoryWriter::create(&dir.path().join("h.jsonl")).unwrap();
        // `sleep` stands in for the worker: this tests process handling, not the worker.
        let fleet = fleet_of("/bin/sleep", dir.path(), writer.recorder());
        let a = fleet.spawn().unwrap();
        let b = fleet.spawn().unwrap();
        assert_eq!(fleet.alive(), vec![a.clone(), b.clone()]);
        assert!(fleet.signal(&a, libc::SIGSTOP));
        assert_eq!(fleet.state(&a), Some(State::Paused));
        assert!(fleet.signal(&a, libc::SIGCONT));
        assert!(fleet.signal(&a, libc::SIGKILL));
        assert!(fleet.wait_exit(&a, Duration::from_secs(5)).await);
        assert_eq!(fleet.state(&a), Some(State::Exited));
        let pid_b = fleet.pid(&b).unwrap();
        assert!(is_alive(pid_b));
        drop(fleet);
        // The guard SIGKILLed b's group; wait for the kernel to reap it (the wait task does).
        let start = Instant::now();
        while is_alive(pid_b) && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!is_alive(pid_b), "worker {pid_b} survived the fleet");
    }
}
