//! The scale bench's cost model: the rates measured at the largest fleet of each discovery
//! design, priced at any fleet size. Pure.
//!
//! What grows with what, per design:
//!
//! - renewals: write units per stream, flat in the fleet's size (both designs);
//! - scans of the lease table: per stream and worker with full discovery (every worker reads
//!   the whole table), per stream alone with segmented discovery (the fleet reads each segment
//!   about three times per interval, whatever its size);
//! - the membership table (segmented only): one heartbeat write per worker per interval, and
//!   every worker reads every member: per worker², small items;
//! - segmented reads are priced in 4 KB blocks (a segment of a few items still costs a whole
//!   block, so rates measured on a small table would overprice a large one), calibrated by
//!   what was measured at the largest fleet;
//! - the fleet signal: every `FLEET_POLL_MS` per worker, capped for the fleet
//!   (`lease_table::fleet_poll_budget`: what the scans leave of `FLEET_READS_PER_SECOND`; with
//!   segmented discovery only about three scans an interval read the signal's segment).

use serde::Serialize;

use super::output::headers;
use super::scale::ScaleRow;
use crate::cost::Discovery;
use crate::report::{Cell, Table};

/// Seconds in the 30-day month the cost model prices.
pub const MONTH_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// One row of the cost model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostModelRow {
    pub discovery: Discovery,
    pub streams: u64,
    pub workers: u64,
    pub read_units_per_s: f64,
    pub write_units_per_s: f64,
    pub usd_per_month: f64,
    /// Reads of the hottest item per second at this size.
    pub hottest_item_reads_per_s: f64,
}

/// `bench.json`'s `cost_model`: the measured rates priced at any size, with what it assumes.
#[derive(Debug, Clone, Serialize)]
pub struct CostModel {
    pub assumptions: Vec<String>,
    pub rows: Vec<CostModelRow>,
}

/// Bytes of a lease item as the model prices segment reads (as `harness cost`'s default).
pub const ITEM_BYTES: f64 = 200.0;

/// Read units per second of `w` workers each reading `per_read` bytes `reads_per_s` times a
/// second, eventually consistent: half a unit per 4 KB block, at least one block a request.
fn block_reads(w: f64, reads_per_s: f64, per_read: f64) -> f64 {
    w * reads_per_s * (per_read / 4096.0).ceil().max(1.0) * 0.5
}

/// The rates of one measured row, per stream, worker or member and second.
struct Rates {
    discovery: Discovery,
    renew_per_stream: f64,
    /// Full: lease-table scan units per stream and worker.
    scan_per_stream: f64,
    /// Segmented: measured lease-table scan units over what [`block_reads`] of 200-byte items
    /// gives at the measured size (consistent rescans, real item sizes).
    segment_calibration: f64,
    member_write_per_worker: f64,
    /// Measured membership read units over what [`block_reads`] of 150-byte members gives.
    member_calibration: f64,
    units_per_fleet_read: f64,
    scans_per_worker: f64,
}

impl Rates {
    fn of(m: &ScaleRow) -> Rates {
        let hour = |x: f64| x / 3600.0;
        let get = |map: &std::collections::BTreeMap<String, f64>, k: &str| {
            map.get(k).copied().unwrap_or(0.0)
        };
        let (api, members, requests) = (
            &m.units_per_stream_hour_by_api,
            &m.member_units_per_stream_hour_by_api,
            &m.requests_per_stream_hour,
        );
        let w = m.workers.max(1) as f64;
        let n = m.streams.max(1) as f64;
        let scans_per_worker = m.scans_per_s / w;
        let lease_scan = hour(get(api, "Scan") - get(members, "Scan"));
        let calibration = |measured: f64, modelled: f64| {
            if modelled > 0.0 && measured > 0.0 {
                measured / modelled
            } else {
                1.0
            }
        };
        let mut rates = Rates {
            discovery: m.discovery,
            renew_per_stream: hour(get(api, "UpdateItem") - get(members, "UpdateItem")),
            scan_per_stream: lease_scan / w,
            segment_calibration: 1.0,
            member_write_per_worker: hour(get(members, "UpdateItem")) * n / w,
            member_calibration: 1.0,
            // The bidder's consistent reads of the stream it bid on (`get`, 1 unit each) are
            // `GetItem`s too.
            units_per_fleet_read: {
                let fleet_reads = get(requests, "fleet_read");
                if fleet_reads > 0.0 {
                    (get(api, "GetItem") - get(requests, "get")).max(0.0) / fleet_reads
                } else {
                    0.5
                }
            },
            scans_per_worker,
        };
        if m.discovery == Discovery::Segmented {
            rates.segment_calibration = calibration(lease_scan * n, rates.segment_reads(n, w));
            rates.member_calibration =
                calibration(hour(get(members, "Scan")) * n, rates.member_reads(w));
        }
        rates
    }

    /// Segmented: the fleet's lease-table scan units per second at `n` streams over `w`
    /// workers (each reads its own segment, its predecessor's and one other, `n / w` items
    /// each), uncalibrated.
    fn segment_reads(&self, n: f64, w: f64) -> f64 {
        let segments = crate::cost::SEGMENTS_PER_WORKER;
        block_reads(
            w,
            self.scans_per_worker * w.min(segments),
            n * ITEM_BYTES / w,
        )
    }

    /// Segmented: the fleet's membership read units per second at `w` workers, uncalibrated.
    fn member_reads(&self, w: f64) -> f64 {
        block_reads(
            w,
            self.scans_per_worker,
            w * crate::cost::MEMBER_ITEM_BYTES as f64,
        )
    }

    /// Fleet-signal reads per second of `w` workers polling every `fleet_poll_ms`.
    fn fleet_reads(&self, w: f64, fleet_poll_ms: u64) -> f64 {
        if fleet_poll_ms == 0 {
            return 0.0;
        }
        let scan_seconds = if self.scans_per_worker > 0.0 {
            1.0 / self.scans_per_worker
        } else {
            0.0
        };
        // Segmented: about three of the fleet's scans read the signal's segment an interval
        // (the worker's `fleet_every`).
        let scan_seconds = match self.discovery {
            Discovery::Full => scan_seconds,
            Discovery::Segmented => scan_seconds * w / crate::cost::SEGMENTS_PER_WORKER,
        };
        (w * 1000.0 / fleet_poll_ms as f64).min(lease_table::fleet_poll_budget(w, scan_seconds))
    }

    fn price(&self, size: (u64, u64), fleet_poll_ms: u64, prices: (f64, f64)) -> CostModelRow {
        let (n, w) = (size.0 as f64, size.1 as f64);
        let fleet_reads = self.fleet_reads(w, fleet_poll_ms);
        let (scan_units, member_units) = match self.discovery {
            Discovery::Full => (self.scan_per_stream * n * w, 0.0),
            Discovery::Segmented => (
                self.segment_reads(n, w) * self.segment_calibration,
                self.member_reads(w) * self.member_calibration,
            ),
        };
        let write_units_per_s = self.renew_per_stream * n + self.member_write_per_worker * w;
        let read_units_per_s = scan_units + member_units + fleet_reads * self.units_per_fleet_read;
        let hottest_item_reads_per_s = match self.discovery {
            Discovery::Full => self.scans_per_worker * w + fleet_reads,
            Discovery::Segmented => (fleet_reads
                + crate::cost::SEGMENTS_PER_WORKER * self.scans_per_worker)
                .max(self.scans_per_worker * w),
        };
        CostModelRow {
            discovery: self.discovery,
            streams: size.0,
            workers: size.1,
            read_units_per_s,
            write_units_per_s,
            usd_per_month: (write_units_per_s * prices.0 + read_units_per_s * prices.1)
                * MONTH_SECONDS
                / 1e6,
            hottest_item_reads_per_s,
        }
    }

    fn assumptions(&self, m: &ScaleRow) -> Vec<String> {
        let name = self.discovery.name();
        let mut out = vec![
            format!(
                "{name}: rates measured at {} streams over {} workers in a {:.0} s quiet window",
                m.streams,
                m.workers,
                m.window_ms as f64 / 1000.0
            ),
            format!(
                "{name}: renewal write units {:.0} per stream-hour (flat in the fleet's size)",
                self.renew_per_stream * 3600.0
            ),
        ];
        out.push(match self.discovery {
            Discovery::Full => format!(
                "{name}: lease-table scan read units {:.2} per stream-hour per worker (every worker scans the whole table)",
                self.scan_per_stream * 3600.0
            ),
            Discovery::Segmented => format!(
                "{name}: lease-table segments and the membership table priced as reads of 4 KB blocks ({ITEM_BYTES:.0}-byte items, {}-byte members, at least one block a request, 0.5 units each), times what the measurement showed over that ({:.2} for segments, {:.2} for members); membership writes {:.1} units per worker-hour",
                crate::cost::MEMBER_ITEM_BYTES,
                self.segment_calibration,
                self.member_calibration,
                self.member_write_per_worker * 3600.0
            ),
        });
        out
    }
}

/// Prices the rates measured at the largest fleet of each discovery in `measured` at every
/// size of `sizes`.
pub fn cost_model(
    measured: &[ScaleRow],
    sizes: &[(u64, u64)],
    fleet_poll_ms: u64,
    write_price: f64,
    read_price: f64,
) -> CostModel {
    let mut designs: Vec<Discovery> = measured.iter().map(|r| r.discovery).collect();
    designs.sort_unstable();
    designs.dedup();
    let mut assumptions = Vec::new();
    let mut rows = Vec::new();
    for d in designs {
        let Some(largest) = measured
            .iter()
            .filter(|r| r.discovery == d)
            .max_by_key(|r| r.workers)
        else {
            continue;
        };
        let rates = Rates::of(largest);
        assumptions.extend(rates.assumptions(largest));
        rows.extend(
            sizes
                .iter()
                .map(|s| rates.price(*s, fleet_poll_ms, (write_price, read_price))),
        );
    }
    assumptions.push(format!(
        "fleet signal: every {fleet_poll_ms} ms per worker, at most {} reads/s for the fleet's polls and the scans that read it together",
        lease_table::FLEET_READS_PER_SECOND
    ));
    assumptions.push(format!(
        "on-demand ${write_price}/M write units, ${read_price}/M read units, 30-day month; checkpoints and takeovers left out"
    ));
    CostModel { assumptions, rows }
}

/// The cost model in the report's table model.
pub fn cost_model_table(m: &CostModel) -> Table {
    let rows = m
        .rows
        .iter()
        .map(|r| -> Vec<Cell> {
            vec![
                r.discovery.name().into(),
                r.streams.to_string().into(),
                r.workers.to_string().into(),
                format!("{:.0}", r.read_units_per_s).into(),
                format!("{:.0}", r.write_units_per_s).into(),
                format!("{:.0}", r.hottest_item_reads_per_s).into(),
                format!("{:.0}", r.usd_per_month).into(),
            ]
        })
        .collect();
    let names = [
        "discovery",
        "streams",
        "workers",
        "read units/s",
        "write units/s",
        "hottest item reads/s",
        "USD / month",
    ];
    Table {
        id: "cost-model",
        title: "Cost model (measured rates, priced)".to_string(),
        intro: Some(m.assumptions.join("; ")),
        headers: headers(&names),
        rows,
        note: None,
    }
}
