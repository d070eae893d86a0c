//! A fleet of supervisor cores ([`Supervision`]) on a virtual clock against an in-memory lease
//! table that applies the design's conditional writes, with no I/O: the model the property
//! tests (`sim_tests`, `segmented_tests`) run. (The real table is exercised by the process
//! tests; this checks the decisions.)

use super::*;
use lease_table::members::Member;
use lease_table::LeaseItem;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::time::Instant;

pub(super) const LEASE_MS: i64 = 3000;
pub(super) const RENEW_MS: i64 = 1000;
pub(super) const SKEW_MS: i64 = 200;
pub(super) const TICK_MS: i64 = 50;

pub(super) struct SimWorker {
    pub(super) name: String,
    pub(super) core: Supervision,
    /// Streams it runs → (fence, releasing).
    pub(super) owned: HashMap<String, (u64, bool)>,
    pub(super) next_scan: i64,
    pub(super) next_renew: i64,
    pub(super) alive: bool,
    pub(super) started: bool,
}

pub(super) struct Sim {
    pub(super) t0: Instant,
    pub(super) base_ms: i64,
    pub(super) now: i64,
    pub(super) table: Vec<LeaseItem>,
    pub(super) bids: HashMap<String, Bid>,
    pub(super) workers: Vec<SimWorker>,
    /// Segmented discovery: the membership table, by owner (`None`: full discovery).
    pub(super) members: Option<HashMap<String, Member>>,
    /// (virtual ms, stream) of every acquisition.
    pub(super) changes: Vec<(i64, String)>,
    /// Acquires the table refused (lost races).
    pub(super) refused: usize,
    /// Scans in a tick see the table as it was when the tick began (workers scanning at the
    /// same moment, as a real fleet's scans overlap), not each other's writes of that tick.
    pub(super) overlapping_scans: bool,
    pub(super) tick_view: Option<Vec<LeaseItem>>,
    /// How long each scan took, as the workers are told (it spaces their hurried rescans).
    pub(super) scan_took: Duration,
    /// The fleet signal: its generation and the draining owners.
    pub(super) generation: u64,
    pub(super) draining: Vec<String>,
    /// Fleet-signal reads due: (virtual ms, worker).
    pub(super) fleet_reads: Vec<(i64, usize)>,
}

pub(super) fn settings() -> Settings {
    Settings {
        lease: Duration::from_millis(LEASE_MS as u64),
        renew: Duration::from_millis(RENEW_MS as u64),
        scan: Duration::from_millis(RENEW_MS as u64),
        skew: Duration::from_millis(SKEW_MS as u64),
        max_streams: usize::MAX,
        expiry_aware: true,
        fleet_poll: Duration::ZERO,
    }
}

impl Sim {
    pub(super) fn new(streams: usize, starts: &[i64]) -> Sim {
        let table = (0..streams)
            .map(|i| LeaseItem {
                stream_id: format!("s-{i:04}"),
                ..LeaseItem::default()
            })
            .collect();
        let workers = starts
            .iter()
            .enumerate()
            .map(|(i, start)| {
                let name = format!("w-{i}");
                SimWorker {
                    core: Supervision::new(settings(), &name),
                    name,
                    owned: HashMap::new(),
                    next_scan: *start,
                    next_renew: *start,
                    alive: true,
                    started: false,
                }
            })
            .collect();
        Sim {
            t0: Instant::now(),
            base_ms: 1_800_000_000_000,
            now: 0,
            table,
            bids: HashMap::new(),
            workers,
            members: None,
            changes: Vec::new(),
            refused: 0,
            overlapping_scans: false,
            tick_view: None,
            scan_took: Duration::from_millis(5),
            generation: 0,
            draining: Vec::new(),
            fleet_reads: Vec::new(),
        }
    }

    pub(super) fn ms(&self) -> i64 {
        self.base_ms + self.now
    }

    pub(super) fn instant(&self) -> Instant {
        self.t0 + Duration::from_millis(self.now as u64)
    }

    /// The worker's acquire condition (`ops::acquire_observed`: free, ours, or exactly as
    /// seen; never on wall-clock expiry), applied to the in-memory table.
    #[allow(clippy::result_large_err)] // a test double: the refused item, as the table answers
    pub(super) fn acquire(&mut self, attempt: &Attempt, me: &str) -> Result<LeaseItem, LeaseItem> {
        let stream = attempt.stream_id.as_str();
        let now = self.ms();
        let item = self
            .table
            .iter_mut()
            .find(|i| i.stream_id == stream)
            .expect("only existing streams are planned");
        let unchanged = attempt.seen.as_ref().is_some_and(|s| {
            item.owner_id.as_deref() == Some(s.owner_id.as_str())
                && item.fence_token == Some(s.fence_token)
                && item.lease_expires_at == Some(s.lease_expires_at)
        });
        let free = item.owner_id.is_none() || item.owner_id.as_deref() == Some(me) || unchanged;
        if !free {
            return Err(item.clone());
        }
        item.owner_id = Some(me.to_string());
        item.lease_expires_at = Some(now + LEASE_MS);
        item.fence_token = Some(item.fence_token.unwrap_or(0) + 1);
        item.updated_at = Some(now);
        Ok(item.clone())
    }

    pub(super) fn round(&mut self, w: usize, scan: bool) -> bool {
        let (now_ms, now) = (self.ms(), self.instant());
        if scan {
            let bids: Vec<Bid> = self.bids.values().cloned().collect();
            let items = self.tick_view.clone().unwrap_or_else(|| self.table.clone());
            if self.members.is_some() {
                self.segment_scan(w, items, bids);
            } else {
                self.workers[w]
                    .core
                    .on_scan(items, bids, self.scan_took, now);
            }
        }
        let owned: HashMap<String, bool> = self.workers[w]
            .owned
            .iter()
            .map(|(s, (_, r))| (s.clone(), *r))
            .collect();
        let round = self.workers[w].core.round(&owned, now_ms, now);
        let me = self.workers[w].name.clone();
        let mut raced = false;
        for attempt in &round.acquire {
            let stream = &attempt.stream_id;
            match self.acquire(attempt, &me) {
                Ok(item) => {
                    let fence = item.fence_token.unwrap_or(0);
                    if self.workers[w].core.on_acquired(item, now) {
                        self.workers[w].owned.insert(stream.clone(), (fence, false));
                        self.changes.push((self.now, stream.clone()));
                    }
                }
                Err(current) => {
                    raced = true;
                    self.refused += 1;
                    self.workers[w].core.on_refused(Some(current), now);
                }
            }
        }
        if let Some(stream) = &round.bid {
            let held_by_other = self
                .table
                .iter()
                .any(|i| i.stream_id == *stream && i.owner_id.as_deref().is_some_and(|o| o != me));
            if held_by_other {
                if let Some(m) = self.members.as_mut().and_then(|m| m.get_mut(&me)) {
                    m.bid = Some((stream.clone(), now_ms));
                }
                self.bids.insert(
                    stream.clone(),
                    Bid {
                        stream_id: stream.clone(),
                        bidder: me.clone(),
                        at: now_ms,
                    },
                );
            }
        }
        if let Some(m) = self.members.as_mut().and_then(|m| m.get_mut(&me)) {
            if !round.handoffs.is_empty() || !round.pointers.is_empty() {
                m.handoff = round.handoffs.clone();
                m.handoff.extend(round.pointers.iter().cloned());
                m.handoff_at = now_ms;
            }
        }
        for (stream, _) in &round.release {
            if let Some(slot) = self.workers[w].owned.get_mut(stream) {
                slot.1 = true;
            }
        }
        if self.members.is_some() && !round.release.is_empty() {
            // Segmented: the releases are announced (the worker bumps the fleet signal once
            // they are done, next tick here), and each worker reads the signal a tick later.
            self.generation += 1;
            for r in 0..self.workers.len() {
                if self.workers[r].alive && r != w {
                    self.fleet_reads.push((self.now + 2 * TICK_MS, r));
                }
            }
        }
        let owned: HashSet<String> = self.workers[w].owned.keys().cloned().collect();
        self.workers[w]
            .core
            .finish_round(&round, raced, &owned, now_ms, now)
    }

    /// Segmented discovery's scan for worker `w`: its heartbeat, the membership table, then
    /// its own segment and the rotating one (segments by a hash of the stream id, as
    /// DynamoDB's parallel scan splits by the hash of the key).
    pub(super) fn segment_scan(&mut self, w: usize, items: Vec<LeaseItem>, bids: Vec<Bid>) {
        let (now_ms, now) = (self.ms(), self.instant());
        let worker = &mut self.workers[w];
        let members = self.members.as_mut().expect("segmented");
        let entry = members.entry(worker.name.clone()).or_default();
        *entry = Member {
            owner_id: worker.name.clone(),
            held: worker.owned.len(),
            segment_items: worker.core.segment_count().0,
            segments: worker.core.segment_count().1,
            expires_at: now_ms + LEASE_MS,
            bid: entry.bid.clone(),
            draining: entry.draining,
            handoff: entry.handoff.clone(),
            handoff_at: entry.handoff_at,
            ..Member::default()
        };
        worker.core.on_members(members.values().cloned().collect());
        let segments = worker.core.next_segments(now_ms);
        let read = segments.read();
        let segment = |item: &LeaseItem| segment_of(&item.stream_id, segments.total);
        let own_items = items.iter().filter(|i| segment(i) == segments.own).count();
        let owned: HashSet<String> = worker.owned.keys().cloned().collect();
        let followed: Vec<String> = worker
            .core
            .streams_to_follow(now_ms, &owned)
            .into_iter()
            .map(|b| b.stream_id)
            .collect();
        let seen: Vec<LeaseItem> = items
            .into_iter()
            .filter(|i| read.contains(&segment(i)) || followed.contains(&i.stream_id))
            .collect();
        let bids = bids
            .into_iter()
            .filter(|b| seen.iter().any(|i| i.stream_id == b.stream_id))
            .collect();
        worker
            .core
            .on_segment_scan(seen, bids, own_items, self.scan_took, now, now_ms);
    }

    /// One tick: releases complete, renewals, then every due round.
    pub(super) fn tick(&mut self) {
        let now_ms = self.ms();
        self.tick_view = self.overlapping_scans.then(|| self.table.clone());
        for w in 0..self.workers.len() {
            if !self.workers[w].alive
                || self.now < self.workers[w].next_scan && !self.workers[w].started
            {
                continue;
            }
            self.workers[w].started = true;
            let me = self.workers[w].name.clone();
            // Releases asked for in the last round are done by now.
            let releasing: Vec<(String, u64)> = self.workers[w]
                .owned
                .iter()
                .filter(|(_, (_, r))| *r)
                .map(|(s, (f, _))| (s.clone(), *f))
                .collect();
            for (stream, fence) in releasing {
                self.workers[w].owned.remove(&stream);
                if let Some(item) = self.table.iter_mut().find(|i| i.stream_id == stream) {
                    if item.owner_id.as_deref() == Some(me.as_str())
                        && item.fence_token == Some(fence)
                    {
                        item.owner_id = None;
                        item.lease_expires_at = None;
                        item.updated_at = Some(now_ms);
                    }
                }
            }
            if self.now >= self.workers[w].next_renew {
                self.workers[w].next_renew = self.now + RENEW_MS;
                let mut lost = Vec::new();
                for (stream, (fence, _)) in &self.workers[w].owned {
                    let item = self
                        .table
                        .iter_mut()
                        .find(|i| i.stream_id == *stream)
                        .unwrap();
                    let ours = item.owner_id.as_deref() == Some(me.as_str())
                        && item.fence_token == Some(*fence)
                        && item.lease_expires_at.is_some_and(|t| t >= now_ms);
                    if ours {
                        item.lease_expires_at = Some(now_ms + LEASE_MS);
                    } else {
                        lost.push(stream.clone());
                    }
                }
                for stream in lost {
                    self.workers[w].owned.remove(&stream);
                }
            }
            let read_due = self
                .fleet_reads
                .iter()
                .any(|(t, r)| *r == w && *t <= self.now);
            if read_due {
                self.fleet_reads.retain(|(t, r)| *r != w || *t > self.now);
                let read = self.workers[w]
                    .core
                    .on_fleet_signal(self.generation, self.draining.clone());
                if read.changed {
                    let hurry = self.round(w, true);
                    let next = self.workers[w].core.after_scan(hurry);
                    self.workers[w].next_scan = self.now + next.as_millis() as i64;
                }
            } else if self.now >= self.workers[w].next_scan {
                let next = match self.workers[w].core.scheduled() {
                    Scheduled::View => {
                        let hurry = self.round(w, false);
                        self.workers[w].core.after_view_round(hurry)
                    }
                    Scheduled::Scan { .. } => {
                        let hurry = self.round(w, true);
                        self.workers[w].core.after_scan(hurry)
                    }
                };
                self.workers[w].next_scan = self.now + next.as_millis() as i64;
            }
            if self.workers[w]
                .core
                .watch_at_ms()
                .is_some_and(|at| at <= now_ms)
            {
                let hurry = self.round(w, false);
                if let Some(soon) = self.workers[w].core.after_watch_round(hurry) {
                    let at = self.now + soon.as_millis() as i64;
                    self.workers[w].next_scan = self.workers[w].next_scan.min(at);
                }
            }
        }
        self.now += TICK_MS;
    }

    pub(super) fn run_until(&mut self, until: i64) {
        while self.now < until {
            self.tick();
        }
    }

    /// `owner` releases `streams` (as a drain does): each freed now, the fleet signal bumped,
    /// and each live worker `w` reads it `reads[w]` ticks later.
    pub(super) fn release(&mut self, owner: &str, streams: &[String], reads: &[i64]) {
        let now_ms = self.ms();
        for item in &mut self.table {
            if streams.contains(&item.stream_id) && item.owner_id.as_deref() == Some(owner) {
                item.owner_id = None;
                item.lease_expires_at = None;
                item.updated_at = Some(now_ms);
            }
        }
        self.generation += 1;
        for w in 0..self.workers.len() {
            if self.workers[w].alive {
                let delay = reads.get(w).copied().unwrap_or(0) * TICK_MS;
                self.fleet_reads.push((self.now + delay, w));
            }
        }
    }

    /// The streams `owner` holds in the table.
    pub(super) fn held_by(&self, owner: &str) -> Vec<&LeaseItem> {
        self.table
            .iter()
            .filter(|i| i.owner_id.as_deref() == Some(owner))
            .collect()
    }

    /// When `stream` was first acquired at or after `since` (virtual ms).
    pub(super) fn taken_at(&self, stream: &str, since: i64) -> Option<i64> {
        self.changes
            .iter()
            .find(|(t, s)| *t >= since && s == stream)
            .map(|(t, _)| *t)
    }

    pub(super) fn kill(&mut self, w: usize) {
        self.workers[w].alive = false;
        self.workers[w].owned.clear();
    }

    /// Counts of streams per live worker, each validly held in the table.
    pub(super) fn shares(&self) -> Vec<usize> {
        let now = self.ms();
        self.workers
            .iter()
            .filter(|w| w.alive)
            .map(|w| {
                w.owned
                    .iter()
                    .filter(|(s, (f, _))| {
                        self.table.iter().any(|i| {
                            i.stream_id == **s
                                && i.owner_id.as_deref() == Some(w.name.as_str())
                                && i.fence_token == Some(*f)
                                && i.lease_expires_at.is_some_and(|t| t >= now)
                        })
                    })
                    .count()
            })
            .collect()
    }

    pub(super) fn check_settled(
        &self,
        streams: usize,
        quiet_since: i64,
    ) -> Result<(), TestCaseError> {
        let shares = self.shares();
        prop_assert_eq!(
            shares.iter().sum::<usize>(),
            streams,
            "every stream owned: {:?}",
            shares
        );
        let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "shares settle within one: {:?}", shares);
        let late: Vec<_> = self
            .changes
            .iter()
            .filter(|(t, _)| *t >= quiet_since)
            .collect();
        prop_assert!(late.is_empty(), "no oscillation once settled: {:?}", late);
        Ok(())
    }
}

/// Which of `total` segments a stream falls in (FNV-1a of its id).
pub(super) fn segment_of(stream: &str, total: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in stream.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % total.max(1) as u64) as usize
}
