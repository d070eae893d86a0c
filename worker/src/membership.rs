//! Segmented discovery's reads and writes (`DISCOVERY=segmented`, issue #20): this worker's
//! membership item (its heartbeat), the membership table, and its three segments of the lease
//! table. Which segments, who is live and what the counts mean are decided by the core
//! ([`crate::decide::Census`], [`Supervision::next_segments`]); this module does the I/O.
//!
//! Per scan interval a worker writes its item once (about 150 bytes: 1 write unit), reads the
//! membership table (one item per worker) and three segments of the lease table (its own, its
//! predecessor's, a rotating one): the fleet's reads of the lease table per interval stay about
//! three, whatever the number of workers.

use std::collections::HashSet;
use std::time::Duration;

use lease_table::members::Member;
use tokio::time::Instant;

use crate::decide::Supervision;
use crate::lease::{CallError, LeaseTable, ScanView};

/// What this worker last told the membership table.
#[derive(Debug, Default)]
pub struct Membership {
    /// When the heartbeat was last written.
    last_beat: Option<Instant>,
    /// The last bid (stream, Unix ms), carried in the heartbeat while fresh.
    bid: Option<(String, i64)>,
    /// The last handoffs (stream → member) and when they were decided (Unix ms), carried in
    /// the heartbeat while fresh.
    handoff: (Vec<(String, String)>, i64),
    /// Free streams pointed out since the last heartbeat, for the next.
    pointers: Vec<(String, String)>,
}

impl Membership {
    /// This worker's item as of now.
    fn member(
        &self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        draining: bool,
    ) -> Member {
        let now_ms = lease_table::now_ms();
        let lease_ms = core.settings().lease.as_millis() as i64;
        Member {
            owner_id: table.owner_id().to_string(),
            instance: table.instance().to_string(),
            held,
            segment_items: core.segment_count().0,
            segments: core.segment_count().1,
            expires_at: now_ms + lease_ms,
            draining,
            bid: self.bid.clone().filter(|(_, at)| *at >= now_ms - lease_ms),
            handoff: if self.handoff.1 >= now_ms - lease_ms {
                self.handoff.0.clone()
            } else {
                Vec::new()
            },
            handoff_at: self.handoff.1,
        }
    }

    /// Writes the heartbeat now (with the streams pointed out since the last); on success
    /// remembers it.
    async fn beat(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        draining: bool,
        timeout: Duration,
    ) -> Result<(), CallError> {
        if !self.pointers.is_empty() {
            let pointers = std::mem::take(&mut self.pointers);
            let lease_ms = core.settings().lease.as_millis() as i64;
            self.name(pointers, lease_table::now_ms(), lease_ms);
        }
        let member = self.member(table, core, held, draining);
        table.heartbeat(&member, timeout).await?;
        self.last_beat = Some(Instant::now());
        Ok(())
    }

    /// One discovery scan: the heartbeat when half a renew interval has passed since the last
    /// one (or a bid is new), the membership table, then this worker's own segment, its
    /// standby segment and the rotating one together, and the streams bid on or handed to it.
    /// The view handed to the core holds them all; its own segment's count goes into the next
    /// heartbeat. A failed heartbeat or membership read costs accuracy only (the last census
    /// stays); a failed own or standby segment read fails the scan.
    pub async fn scan(
        &mut self,
        table: &LeaseTable,
        core: &mut Supervision,
        held_streams: &HashSet<String>,
        page_timeout: Duration,
        consistent: bool,
    ) -> Result<usize, CallError> {
        let held = held_streams.len();
        let began = Instant::now();
        if core.heartbeat_due(self.last_beat, began) {
            if let Err(e) = self.beat(table, core, held, false, page_timeout).await {
                tracing::warn!(error = %e, "membership heartbeat failed");
            }
        }
        match table.scan_members(page_timeout, consistent).await {
            Ok(members) => core.on_members(members),
            Err(e) => {
                tracing::warn!(error = %e, "membership read failed; planning with the last one")
            }
        }
        let segments = core.next_segments(lease_table::now_ms());
        let total = segments.total;
        // Own, standby, rotating (`Segments::read`), together. A failed own or standby read
        // fails the scan (a dead neighbour's leases are watched in the standby segment).
        let read = segments.read();
        let views = futures_util::future::join_all(
            read.iter()
                .map(|segment| table.scan(page_timeout, consistent, Some((*segment, total)))),
        )
        .await;
        let mut view = ScanView::default();
        let mut own_items = 0;
        for (i, scanned) in views.into_iter().enumerate() {
            match scanned {
                Ok(other) => {
                    if i == 0 {
                        own_items = other.items.len();
                    }
                    view.items.extend(other.items);
                    view.bids.extend(other.bids);
                }
                Err(e) if Some(read[i]) == segments.rotating => {
                    tracing::debug!(error = %e, "rotating segment read failed")
                }
                Err(e) => return Err(e),
            }
        }
        // The stream this worker bid on and those handed to it: the release is this worker's
        // to take, and the stream may lie in no segment read.
        let followed: Vec<_> = core
            .streams_to_follow(lease_table::now_ms(), held_streams)
            .into_iter()
            .filter(|b| !view.items.iter().any(|i| i.stream_id == b.stream_id))
            .collect();
        let reads = futures_util::future::join_all(
            followed
                .iter()
                .map(|b| table.get(&b.stream_id, page_timeout)),
        )
        .await;
        for (bid, read) in followed.into_iter().zip(reads) {
            match read {
                Ok(Some(item)) => {
                    view.items.push(item);
                    view.bids.push(bid);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(stream_id = %bid.stream_id, error = %e, "reading a stream bid on or handed over failed")
                }
            }
        }
        let items = view.items.len();
        core.on_segment_scan(
            view.items,
            view.bids,
            own_items,
            began.elapsed(),
            Instant::now(),
            lease_table::now_ms(),
        );
        Ok(items)
    }

    /// A bid was just written on `stream_id`: the heartbeat carries it at once, so the owner
    /// (whose segments may not show the stream) sees it at its next membership read.
    pub async fn on_bid(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        stream_id: &str,
        timeout: Duration,
    ) {
        self.bid = Some((stream_id.to_string(), lease_table::now_ms()));
        if let Err(e) = self.beat(table, core, held, false, timeout).await {
            tracing::warn!(%stream_id, error = %e, "membership heartbeat with a bid failed");
        }
    }

    /// A shed: `handoffs` name who takes each stream released. Written at once, before the
    /// releases are sent, so a member reading it after the fleet signal's bump finds its
    /// streams; earlier names stay while fresh (a member may not have read them yet).
    pub async fn on_handoff(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        handoffs: Vec<(String, String)>,
        timeout: Duration,
    ) {
        let now_ms = lease_table::now_ms();
        self.name(handoffs, now_ms, core.settings().lease.as_millis() as i64);
        if let Err(e) = self.beat(table, core, held, false, timeout).await {
            tracing::warn!(error = %e, "membership heartbeat with handoffs failed; the streams are released unassigned");
        }
    }

    /// Free streams this worker has no room for, each pointed out to a member with room: they
    /// ride with the next heartbeat (no write of their own: during a cold start they change
    /// every round).
    pub fn point(&mut self, pointers: Vec<(String, String)>) {
        if pointers.iter().any(|p| !self.handoff.0.contains(p)) {
            self.pointers = pointers;
        }
    }

    /// Adds `names` to the names carried, keeping the earlier ones still fresh.
    fn name(&mut self, names: Vec<(String, String)>, now_ms: i64, lease_ms: i64) {
        let mut merged: Vec<(String, String)> = if self.handoff.1 >= now_ms - lease_ms {
            self.handoff
                .0
                .iter()
                .filter(|(s, _)| !names.iter().any(|(h, _)| h == s))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        merged.extend(names);
        let excess = merged
            .len()
            .saturating_sub(lease_table::members::MAX_HANDOFFS);
        merged.drain(..excess);
        self.handoff = (merged, now_ms);
    }

    /// The start of a drain: the item says so, and the others stop counting this worker live.
    /// It stays so until it expires, a lease later (its last bids may look fresh until then),
    /// and is deleted by a worker that sees it gone for long.
    /// `handoffs` name who takes each of its streams (written before they are released).
    pub async fn draining(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        handoffs: Vec<(String, String)>,
        timeout: Duration,
    ) {
        self.handoff = (handoffs, lease_table::now_ms());
        if let Err(e) = self.beat(table, core, held, true, timeout).await {
            tracing::warn!(error = %e, "membership draining mark failed; the others count this worker live until its heartbeat expires");
        }
    }
}
