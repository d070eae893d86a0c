//! Segmented discovery's reads and writes (`DISCOVERY=segmented`, issue #20): this worker's
//! membership item (its heartbeat), the membership table, and its two segments of the lease
//! table. Which segments, who is live and what the counts mean are decided by the core
//! ([`crate::decide::Census`], [`Supervision::next_segments`]); this module does the I/O.
//!
//! Per scan interval a worker writes its item once (about 150 bytes: 1 write unit), reads the
//! membership table (one item per worker) and two segments of the lease table: the fleet's
//! reads of the lease table per interval stay about two, whatever the number of workers.

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
        }
    }

    /// Writes the heartbeat now; on success remembers it.
    async fn beat(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        draining: bool,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let member = self.member(table, core, held, draining);
        table.heartbeat(&member, timeout).await?;
        self.last_beat = Some(Instant::now());
        Ok(())
    }

    /// One discovery scan: the heartbeat when half a renew interval has passed since the last
    /// one (or a bid is new), the membership table, then this worker's own segment and the
    /// rotating one together. The view handed to the core holds both segments; its own
    /// segment's count goes into the next heartbeat. A failed heartbeat or membership read
    /// costs accuracy only (the last census stays); a failed segment read fails the scan.
    pub async fn scan(
        &mut self,
        table: &LeaseTable,
        core: &mut Supervision,
        held: usize,
        page_timeout: Duration,
        consistent: bool,
    ) -> Result<usize, CallError> {
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
        let (own, total, rotating) = core.next_segments(lease_table::now_ms());
        let own_scan = table.scan(page_timeout, consistent, Some((own, total)));
        let other_scan = async {
            match rotating {
                Some(other) => table
                    .scan(page_timeout, consistent, Some((other, total)))
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let (own_view, other_view) = tokio::join!(own_scan, other_scan);
        let mut view: ScanView = own_view?;
        let own_items = view.items.len();
        match other_view {
            Ok(Some(other)) => {
                view.items.extend(other.items);
                view.bids.extend(other.bids);
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "rotating segment read failed"),
        }
        // The stream this worker bid on: its owner's answer (a release) is this worker's to
        // take, and the stream may lie in neither segment read.
        let followed = core.bid_to_follow(lease_table::now_ms());
        if let Some(bid) =
            followed.filter(|b| !view.items.iter().any(|i| i.stream_id == b.stream_id))
        {
            match table.get(&bid.stream_id, page_timeout).await {
                Ok(Some(item)) => {
                    view.items.push(item);
                    view.bids.push(bid);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(stream_id = %bid.stream_id, error = %e, "reading the stream bid on failed")
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

    /// The start of a drain: the item says so, and the others stop counting this worker live.
    /// It stays so until it expires, a lease later (its last bids may look fresh until then),
    /// and is deleted by a worker that sees it gone for long.
    pub async fn draining(
        &mut self,
        table: &LeaseTable,
        core: &Supervision,
        held: usize,
        timeout: Duration,
    ) {
        if let Err(e) = self.beat(table, core, held, true, timeout).await {
            tracing::warn!(error = %e, "membership draining mark failed; the others count this worker live until its heartbeat expires");
        }
    }
}
