//! Fault injection: resolving a target at the instant of injection, and executing each action
//! against the fleet (signals, scale-out, ECS-style rolling deploys). Every injection is
//! recorded as an `action` line with what the target owned at that instant, read from the lease
//! table just before the signal is sent. The menu beyond signals (links, DynamoDB, clocks,
//! upstream, sink) is in the submodules.

pub mod clock;
pub mod ddb_http;
pub mod links;
mod menu;
pub mod proxy;
pub mod sink_hook;

pub use menu::{check_environment, prepare_kit, FaultKit};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lease_table::LeaseItem;
use rand::{RngCore, SeedableRng};

use crate::fleet::{Fleet, State};
use crate::history::{Action, ActionStream, Record, Recorder};
use crate::scenario::{deploy_batches, Fault, FaultAction, Target};

/// How long a started worker may take to answer `/readyz` during a rolling deploy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long after a SIGKILL the lease table is read again (see [`settle_after_kill`]).
pub const KILL_SETTLE: Duration = Duration::from_millis(150);
/// Bound on waiting for a SIGKILLed worker's exit to be seen.
const KILL_REAP: Duration = Duration::from_secs(5);

/// Executes faults against a fleet; cheap to clone (one clone per scheduled fault).
#[derive(Clone)]
pub struct Injector {
    pub fleet: Fleet,
    pub client: Client,
    pub table: String,
    pub recorder: Recorder,
    /// Problems met while injecting; each fails the run.
    pub errors: Arc<Mutex<Vec<String>>>,
    /// What the fault menu acts on (proxies, clocks, sink, upstream).
    pub kit: Arc<FaultKit>,
}

impl Injector {
    /// Runs fault number `index`; `draw` is its pre-drawn random number (for `random`).
    pub async fn inject(&self, index: usize, fault: &Fault, draw: u64) {
        if let Err(e) = self.try_inject(index, fault, draw).await {
            let t = self.recorder.now_ms() as f64 / 1000.0;
            self.errors
                .lock()
                .expect("errors lock poisoned")
                .push(format!(
                    "fault {index} ({} at line {}, t={t:.1}s): {e}",
                    fault.action.name(),
                    fault.line
                ));
        }
    }

    async fn try_inject(&self, index: usize, fault: &Fault, draw: u64) -> anyhow::Result<()> {
        match &fault.action {
            FaultAction::Menu(action) => self.inject_menu(index, action, draw).await?,
            FaultAction::Kill { target } => {
                let items = self.snapshot().await?;
                let name = self.resolve(target, &items, draw)?;
                self.kill_recorded(index, &name, &items).await;
            }
            FaultAction::Pause {
                target,
                duration_ms,
            } => {
                let items = self.snapshot().await?;
                let name = self.resolve(target, &items, draw)?;
                self.signal_recorded(index, "pause", &name, libc::SIGSTOP, &items);
                tokio::time::sleep(Duration::from_millis(*duration_ms)).await;
                self.signal_recorded(index, "resume", &name, libc::SIGCONT, &[]);
            }
            FaultAction::Terminate {
                target,
                stop_timeout_ms,
            } => {
                let items = self.snapshot().await?;
                let name = self.resolve(target, &items, draw)?;
                self.terminate(
                    index,
                    &[name],
                    &items,
                    Duration::from_millis(*stop_timeout_ms),
                )
                .await?;
            }
            FaultAction::Start { count } => {
                for _ in 0..*count {
                    let name = self.fleet.spawn()?;
                    self.record(index, "start", &name, Vec::new());
                }
            }
            FaultAction::RollingDeploy {
                minimum_healthy_percent,
                maximum_percent,
                stop_timeout_ms,
            } => {
                let mut old: Vec<String> = self
                    .fleet
                    .alive()
                    .into_iter()
                    .filter(|n| self.fleet.state(n) != Some(State::Stopping))
                    .collect();
                let steps = deploy_batches(old.len(), *minimum_healthy_percent, *maximum_percent)
                    .ok_or_else(|| {
                    anyhow::anyhow!("no deploy plan for {} workers", old.len())
                })?;
                for step in steps {
                    let mut started = Vec::new();
                    for _ in 0..step.start {
                        let name = self.fleet.spawn()?;
                        self.record(index, "start", &name, Vec::new());
                        started.push(name);
                    }
                    // Each new worker's readiness is recorded as it comes (a `ready` line).
                    let ready = started.iter().map(|name| async move {
                        self.fleet.wait_ready(name, READY_TIMEOUT).await?;
                        self.record(index, "ready", name, Vec::new());
                        anyhow::Ok(())
                    });
                    for result in futures_util::future::join_all(ready).await {
                        result?; // ECS does not stop old tasks while the new ones are unhealthy
                    }
                    let stopping: Vec<String> = old.drain(..step.stop.min(old.len())).collect();
                    if !stopping.is_empty() {
                        let items = self.snapshot().await?;
                        self.terminate(
                            index,
                            &stopping,
                            &items,
                            Duration::from_millis(*stop_timeout_ms),
                        )
                        .await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// SIGTERMs `names` (each an `action` line), waits up to `stop_timeout` for each to exit,
    /// then SIGKILLs the stragglers (a `kill` line each), as ECS does with stopTimeout.
    async fn terminate(
        &self,
        index: usize,
        names: &[String],
        items: &[LeaseItem],
        stop_timeout: Duration,
    ) -> anyhow::Result<()> {
        for name in names {
            self.signal_recorded(index, "terminate", name, libc::SIGTERM, items);
        }
        let waits = names.iter().map(|n| self.fleet.wait_exit(n, stop_timeout));
        let exited = futures_util::future::join_all(waits).await;
        let stragglers: Vec<&String> = names
            .iter()
            .zip(exited)
            .filter(|(_, e)| !e)
            .map(|(n, _)| n)
            .collect();
        if !stragglers.is_empty() {
            let items = self.snapshot().await?;
            for name in &stragglers {
                self.signal_recorded(index, "kill", name, libc::SIGKILL, &items);
            }
            // Gone before the caller goes on: a deploy at maximumPercent=100 starts the
            // replacements next, and ECS never runs them beside a task still stopping.
            let waits = stragglers
                .iter()
                .map(|n| self.fleet.wait_exit(n, KILL_REAP));
            futures_util::future::join_all(waits).await;
        }
        Ok(())
    }

    /// The lease table now.
    async fn snapshot(&self) -> anyhow::Result<Vec<LeaseItem>> {
        lease_table::scan_all(&self.client, &self.table)
            .await
            .map_err(|e| anyhow::anyhow!("reading the lease table before injecting: {e}"))
    }

    /// Picks the worker a target names, among running (not paused, not stopping) workers.
    fn resolve(&self, target: &Target, items: &[LeaseItem], draw: u64) -> anyhow::Result<String> {
        let running = self.fleet.in_state(State::Running);
        match target {
            Target::Worker(n) => {
                let name = crate::worker_id::worker_name(*n);
                match self.fleet.state(&name) {
                    Some(State::Running) => Ok(name),
                    Some(state) => anyhow::bail!("target {name} is not running (it is {state:?})"),
                    None => anyhow::bail!("target {name} was never started"),
                }
            }
            Target::Random => pick_random(&running, draw)
                .ok_or_else(|| anyhow::anyhow!("no running worker to pick at random")),
            Target::Busiest => busiest(&running, items, lease_table::now_ms())
                .ok_or_else(|| anyhow::anyhow!("no running worker to pick as the busiest")),
            Target::All => anyhow::bail!("target all names several workers, not one"),
        }
    }

    /// Sends `signal` to `name` and records the action with the streams it held per `items`.
    fn signal_recorded(
        &self,
        index: usize,
        action: &str,
        name: &str,
        signal: i32,
        items: &[LeaseItem],
    ) {
        let now = lease_table::now_ms();
        let streams = owned_by(items, name, now);
        if self.fleet.signal(name, signal) {
            self.record(index, action, name, streams);
        }
    }

    /// SIGKILLs `name` and records the action once a renewal in flight at the kill has had
    /// time to land, with the lease left on each stream read again ([`settle_after_kill`]), so
    /// the crash floor is not one renew interval short. The line carries the kill's time.
    async fn kill_recorded(&self, index: usize, name: &str, items: &[LeaseItem]) {
        let t_ms = self.recorder.now_ms();
        let kill_ms = lease_table::now_ms();
        let mut streams = owned_by(items, name, kill_ms);
        if !self.fleet.signal(name, libc::SIGKILL) {
            return;
        }
        tokio::time::sleep(KILL_SETTLE).await;
        if let Ok(after) = self.snapshot().await {
            settle_after_kill(&mut streams, &after, name, kill_ms);
        }
        self.recorder.record(Record::Action(Action {
            t_ms,
            action: "kill".to_string(),
            target: name.to_string(),
            fault: Some(index),
            streams,
            ..Action::default()
        }));
    }

    fn record(&self, index: usize, action: &str, target: &str, streams: Vec<ActionStream>) {
        self.recorder.record(Record::Action(Action {
            t_ms: self.recorder.now_ms(),
            action: action.to_string(),
            target: target.to_string(),
            fault: Some(index),
            streams,
            ..Action::default()
        }));
    }
}

/// The streams `owner` holds under an unexpired lease at `now_ms`, with the lease left on each.
pub fn owned_by(items: &[LeaseItem], owner: &str, now_ms: i64) -> Vec<ActionStream> {
    items
        .iter()
        .filter(|i| i.owner_id.as_deref() == Some(owner) && i.is_held_at(now_ms))
        .map(|i| ActionStream {
            stream_id: i.stream_id.clone(),
            fence_token: i.fence_token.unwrap_or(0),
            lease_remaining_ms: i.remaining_ms(now_ms),
        })
        .collect()
}

/// After a SIGKILL: a renewal the victim sent just before it died may land after the table was
/// read for the action line, extending the lease by a renew interval the line does not show.
/// Re-read after the kill, take the later expiry of each stream still held by `owner` under the
/// same fence, so the crash floor (lease remaining + skew) is not one interval short.
pub fn settle_after_kill(
    streams: &mut [ActionStream],
    after: &[LeaseItem],
    owner: &str,
    kill_ms: i64,
) {
    for s in streams.iter_mut() {
        let later = after.iter().find(|i| {
            i.stream_id == s.stream_id
                && i.owner_id.as_deref() == Some(owner)
                && i.fence_token.unwrap_or(0) == s.fence_token
        });
        if let Some(expires) = later.and_then(|i| i.lease_expires_at) {
            s.lease_remaining_ms = s.lease_remaining_ms.max(expires - kill_ms);
        }
    }
}

/// The random draw of each of `count` faults, in schedule order, from the run's seed: the same
/// seed always gives the same draws, so a run can be replayed with `--seed`.
pub fn draws(seed: u64, count: usize) -> Vec<u64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..count).map(|_| rng.next_u64()).collect()
}

/// The worker a `random` target names for `draw`, among `running` (in start order).
pub fn pick_random(running: &[String], draw: u64) -> Option<String> {
    if running.is_empty() {
        return None;
    }
    Some(running[(draw % running.len() as u64) as usize].clone())
}

/// The candidate holding most unexpired leases (ties go to the first in `candidates`).
pub fn busiest(candidates: &[String], items: &[LeaseItem], now_ms: i64) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = candidates.iter().map(|c| (c.as_str(), 0)).collect();
    for item in items.iter().filter(|i| i.is_held_at(now_ms)) {
        if let Some(count) = item.owner_id.as_deref().and_then(|o| counts.get_mut(o)) {
            *count += 1;
        }
    }
    let mut best: Option<(&String, usize)> = None;
    for c in candidates {
        let n = counts[c.as_str()];
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((c, n));
        }
    }
    best.map(|(c, _)| c.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_landing_after_the_kill_moves_the_floor() {
        let item = |id: &str, owner: &str, fence: u64, expires: i64| LeaseItem {
            stream_id: id.into(),
            owner_id: Some(owner.into()),
            fence_token: Some(fence),
            lease_expires_at: Some(expires),
            ..LeaseItem::default()
        };
        let before = vec![item("a", "w1", 3, 12_000), item("b", "w1", 5, 11_000)];
        let mut streams = owned_by(&before, "w1", 10_000);
        assert_eq!(streams[0].lease_remaining_ms, 2_000);
        // a was renewed by a request sent before the kill; b was taken over meanwhile.
        let after = vec![item("a", "w1", 3, 13_000), item("b", "w2", 6, 20_000)];
        settle_after_kill(&mut streams, &after, "w1", 10_010);
        assert_eq!(streams[0].lease_remaining_ms, 2_990);
        assert_eq!(
            streams[1].lease_remaining_ms, 1_000,
            "another owner's lease is not ours"
        );
    }

    fn item(stream: &str, owner: &str, expires: i64) -> LeaseItem {
        LeaseItem {
            stream_id: stream.into(),
            owner_id: Some(owner.into()),
            lease_expires_at: Some(expires),
            fence_token: Some(3),
            ..LeaseItem::default()
        }
    }

    #[test]
    fn busiest_counts_only_unexpired_leases_of_candidates() {
        let items = [
            item("a", "worker-1", 1000),
            item("b", "worker-2", 1000),
            item("c", "worker-2", 1000),
            item("d", "worker-3", 1000),
            item("e", "worker-3", 1000),
            item("f", "worker-3", 10), // expired
        ];
        let all = ["worker-1", "worker-2", "worker-3"].map(String::from);
        assert_eq!(busiest(&all, &items, 500).as_deref(), Some("worker-2"));
        assert_eq!(busiest(&all[..1], &items, 500).as_deref(), Some("worker-1"));
        assert_eq!(busiest(&[], &items, 500), None);
        let owned = owned_by(&items, "worker-3", 500);
        assert_eq!(owned.len(), 2);
        assert_eq!(owned[0].lease_remaining_ms, 500);
    }

    fn fleet_of(n: usize) -> Vec<String> {
        (1..=n).map(crate::worker_id::worker_name).collect()
    }

    #[test]
    fn random_targets_are_the_same_for_the_same_seed() {
        let fleet = fleet_of(4);
        let picks = |seed: u64| -> Vec<String> {
            draws(seed, 32)
                .into_iter()
                .map(|d| pick_random(&fleet, d).unwrap())
                .collect()
        };
        assert_eq!(draws(7, 32), draws(7, 32));
        assert_eq!(picks(7), picks(7));
        // A prefix of the schedule does not depend on how many faults follow it.
        assert_eq!(draws(7, 3)[..], draws(7, 32)[..3]);
        // The draw decides: another seed gives another sequence, and every worker gets picked.
        assert_ne!(picks(7), picks(8));
        for seed in [7, 8] {
            let picked: std::collections::BTreeSet<String> = picks(seed).into_iter().collect();
            assert_eq!(picked.len(), fleet.len(), "seed {seed}: {picked:?}");
        }
    }

    #[test]
    fn a_random_pick_needs_a_running_worker() {
        assert_eq!(pick_random(&[], 5), None);
        assert_eq!(
            pick_random(&fleet_of(1), u64::MAX).as_deref(),
            Some("worker-1")
        );
        assert_eq!(pick_random(&fleet_of(3), 4).as_deref(), Some("worker-2"));
    }
}
