//! `harness cost`: what the lease machinery costs on DynamoDB on-demand, from the worker's
//! settings, for fleets too large to run here (100,000 streams, 1,000 workers).
//!
//! A pure model of the requests `lease-worker` makes (lease-table/src): one conditional
//! `UpdateItem` per held stream per renew interval (1 WRU: items are under 1 KB), one full
//! eventually consistent `Scan` per worker per scan interval (0.5 RRU per 4 KB read; the worker
//! scans consistently only after a lost race or a fleet change, which `harness bench scale`
//! counts: a few percent of its scans in a steady fleet), one eventually
//! consistent `GetItem` of the fleet signal per worker per poll (0.5 RRU; the poll slows as the
//! fleet grows so that the whole fleet reads it, polls and scans together, at most
//! `lease_table::FLEET_READS_PER_SECOND` times a second). Checkpoints and
//! takeovers are left out: they scale with traffic and faults, not with the fleet's size. The
//! takeover bench (`harness bench takeover`) measures the same counts on a real table.
//!
//! `--discovery segmented` prices the design argued in worker/README.md ("Discovery at scale")
//! instead: a membership table (one small item per worker, written at each scan, at least half
//! a renew interval apart, and scanned by every worker every scan interval), and each worker
//! scanning three segments of a parallel `Scan` of the lease table (its own, by rank, its
//! predecessor's and one rotating), so that the fleet reads the table about three times per
//! scan interval whatever its size.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::report::{table_markdown, Cell, Table};

/// `harness cost` flags.
#[derive(Debug, Args)]
pub struct CostArgs {
    /// Stream counts to price (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub streams: Vec<u64>,
    /// Worker counts to price (comma-separated); every pair with --streams is a row.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub workers: Vec<u64>,
    /// The workers' RENEW_SECONDS.
    #[arg(long, default_value_t = 10.0)]
    pub renew_seconds: f64,
    /// The workers' SCAN_SECONDS [default: --renew-seconds, as the worker's].
    #[arg(long)]
    pub scan_seconds: Option<f64>,
    /// The workers' FLEET_POLL_MS (0 = the fleet signal is not read).
    #[arg(long, default_value_t = 50)]
    pub fleet_poll_ms: u64,
    /// Bytes per lease item as stored (a stream's item is about 200 bytes).
    #[arg(long, default_value_t = 200)]
    pub item_bytes: u64,
    /// On-demand price, USD per million write request units (us-east-1, 2026).
    #[arg(long, default_value_t = 0.625)]
    pub write_price: f64,
    /// On-demand price, USD per million read request units (us-east-1, 2026).
    #[arg(long, default_value_t = 0.125)]
    pub read_price: f64,
    /// Which discovery to price: `full` (today's worker: every worker scans the whole table) or
    /// `segmented` (the design of worker/README.md, "Discovery at scale").
    #[arg(long, value_enum, default_value_t = Discovery::Full)]
    pub discovery: Discovery,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// How workers discover streams, as priced (and as `harness bench scale` runs them: the
/// worker's `DISCOVERY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    /// Every worker scans the whole lease table every scan interval (today's worker).
    Full,
    /// Two segments per worker per scan interval, plus a membership table.
    Segmented,
}

impl Discovery {
    /// The worker's `DISCOVERY` value.
    pub fn name(self) -> &'static str {
        match self {
            Discovery::Full => "full",
            Discovery::Segmented => "segmented",
        }
    }
}

/// Bytes of one worker's membership item (owner id, task ARN, held count, segment count,
/// heartbeat, draining flag): under 1 KB, so one write unit.
pub const MEMBER_ITEM_BYTES: u64 = 150;
/// Segments each worker scans per scan interval in the segmented design: its own, its
/// predecessor's (the standby read) and a rotating one.
pub const SEGMENTS_PER_WORKER: f64 = lease_table::members::SEGMENT_READS_PER_SCAN as f64;

/// One fleet size, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub streams: u64,
    pub workers: u64,
    /// Renewal writes per second (WRU/s).
    pub renew_wru_s: f64,
    /// Discovery scans' reads per second (RRU/s), all workers.
    pub scan_rru_s: f64,
    /// Fleet-signal reads per second (RRU/s), all workers.
    pub fleet_rru_s: f64,
    /// Membership writes and reads (segmented discovery only; 0 for full).
    pub member_wru_s: f64,
    pub member_rru_s: f64,
    /// USD per 30-day month, each part and the total.
    pub renew_usd_month: f64,
    pub scan_usd_month: f64,
    pub fleet_usd_month: f64,
    pub member_usd_month: f64,
    pub total_usd_month: f64,
    /// Reads per second of the single hottest item, the fleet signal: its own reads plus every
    /// worker's scans (DynamoDB serves about 3,000 RRU/s per partition, so far above that it is
    /// throttled).
    pub hottest_item_reads_s: f64,
    /// Discovery (scans, fleet reads, membership) request units per stream per hour.
    pub discovery_rru_per_stream_hour: f64,
    /// Discovery cost as a percentage of the renewals' cost.
    pub discovery_pct_of_renewals: f64,
}

/// The settings a row is priced with.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub renew_seconds: f64,
    pub scan_seconds: f64,
    pub fleet_poll_ms: u64,
    pub item_bytes: u64,
    pub write_price: f64,
    pub read_price: f64,
    pub discovery: Discovery,
}

const MONTH_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

impl Model {
    /// Prices `streams` over `workers`.
    pub fn row(&self, streams: u64, workers: u64) -> Row {
        let renew_wru_s = streams as f64 / self.renew_seconds;
        // Eventually consistent: half a read unit per 4 KB.
        let scan_rru = (streams * self.item_bytes).div_ceil(4096) as f64 * 0.5;
        let (scan_rru_s, member_wru_s, member_rru_s) = match self.discovery {
            Discovery::Full => (workers as f64 * scan_rru / self.scan_seconds, 0.0, 0.0),
            Discovery::Segmented => {
                // Each worker reads 3 / W of the table (all of it once, at W = 1; twice at 2).
                let passes = SEGMENTS_PER_WORKER.min(workers as f64);
                let members_rru = (workers * MEMBER_ITEM_BYTES).div_ceil(4096) as f64 * 0.5;
                (
                    passes * scan_rru / self.scan_seconds,
                    // A heartbeat at each scan, at least half a renew interval apart.
                    workers as f64 * MEMBER_ITEM_BYTES.div_ceil(1024) as f64
                        / self.scan_seconds.max(self.renew_seconds / 2.0),
                    workers as f64 * members_rru / self.scan_seconds,
                )
            }
        };
        // Each worker's poll interval grows with the fleet, so that the whole fleet reads the
        // signal, polls and scans together, at most `FLEET_READS_PER_SECOND` times a second
        // (`lease_table::fleet_poll_budget`, as the worker's `fleet_poll_for`).
        // Segmented: about three scans an interval read the signal's segment, as if the
        // fleet's scans came W / 3 times further apart (the worker's `fleet_every`).
        let w = workers as f64;
        let scans_reading_signal = match self.discovery {
            Discovery::Full => self.scan_seconds,
            Discovery::Segmented => self.scan_seconds * w / SEGMENTS_PER_WORKER,
        };
        let fleet_reads_s = if self.fleet_poll_ms == 0 {
            0.0
        } else {
            (w * 1000.0 / self.fleet_poll_ms as f64)
                .min(lease_table::fleet_poll_budget(w, scans_reading_signal))
        };
        let fleet_rru_s = fleet_reads_s * 0.5;
        let month = |units_s: f64, price: f64| units_s * MONTH_SECONDS * price / 1e6;
        let renew_usd_month = month(renew_wru_s, self.write_price);
        let scan_usd_month = month(scan_rru_s, self.read_price);
        let fleet_usd_month = month(fleet_rru_s, self.read_price);
        let member_usd_month =
            month(member_wru_s, self.write_price) + month(member_rru_s, self.read_price);
        let discovery_units_s = scan_rru_s + fleet_rru_s + member_wru_s + member_rru_s;
        let discovery_usd_month = scan_usd_month + fleet_usd_month + member_usd_month;
        Row {
            streams,
            workers,
            renew_wru_s,
            scan_rru_s,
            fleet_rru_s,
            member_wru_s,
            member_rru_s,
            renew_usd_month,
            scan_usd_month,
            fleet_usd_month,
            member_usd_month,
            total_usd_month: renew_usd_month + discovery_usd_month,
            // The fleet signal: read on its own, and again by every worker's scan of the whole
            // table (full) or by its segment's three readers an interval (segmented), where
            // every membership item is read by every worker's scan.
            hottest_item_reads_s: match self.discovery {
                Discovery::Full => fleet_reads_s + w / self.scan_seconds,
                Discovery::Segmented => (fleet_reads_s + SEGMENTS_PER_WORKER / self.scan_seconds)
                    .max(w / self.scan_seconds),
            },
            discovery_rru_per_stream_hour: if streams == 0 {
                0.0
            } else {
                discovery_units_s * 3600.0 / streams as f64
            },
            discovery_pct_of_renewals: if renew_usd_month == 0.0 {
                0.0
            } else {
                100.0 * discovery_usd_month / renew_usd_month
            },
        }
    }
}

impl CostArgs {
    /// The model, or what is wrong with the flags (naming the flag and the value).
    pub fn model(&self) -> Result<Model, String> {
        let positive = |flag: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!("{flag} {v}: must be a positive number"))
            }
        };
        let renew_seconds = positive("--renew-seconds", self.renew_seconds)?;
        let scan_seconds = positive(
            "--scan-seconds",
            self.scan_seconds.unwrap_or(self.renew_seconds),
        )?;
        let write_price = positive("--write-price", self.write_price)?;
        let read_price = positive("--read-price", self.read_price)?;
        if self.item_bytes == 0 || self.item_bytes > 400 * 1024 {
            return Err(format!(
                "--item-bytes {}: must be 1..=409600 (DynamoDB's item size limit)",
                self.item_bytes
            ));
        }
        if let Some(w) = self.workers.iter().find(|w| **w == 0) {
            return Err(format!("--workers {w}: a fleet has at least one worker"));
        }
        Ok(Model {
            renew_seconds,
            scan_seconds,
            fleet_poll_ms: self.fleet_poll_ms,
            item_bytes: self.item_bytes,
            write_price,
            read_price,
            discovery: self.discovery,
        })
    }
}

/// Runs `harness cost`: exit 0, or 2 with the flag that is wrong.
pub fn main(args: CostArgs) -> ExitCode {
    let model = match args.model() {
        Ok(model) => model,
        Err(e) => {
            eprintln!("harness cost: {e}");
            return ExitCode::from(2);
        }
    };
    let rows: Vec<Row> = args
        .streams
        .iter()
        .flat_map(|s| args.workers.iter().map(|w| model.row(*s, *w)))
        .collect();
    if args.json {
        match serde_json::to_string_pretty(&rows) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("harness cost: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", table(&model, &rows));
    }
    ExitCode::SUCCESS
}

/// The rows as a Markdown table (the report's table model), with the settings they assume.
pub fn table(model: &Model, rows: &[Row]) -> String {
    let discovery = match model.discovery {
        Discovery::Full => "full scans by every worker",
        Discovery::Segmented => "segmented scans and a membership table",
    };
    let intro = format!(
        "DynamoDB on-demand, discovery by {discovery}, renew {} s, scan {} s, fleet poll {} ms, \
         {} B items, eventually consistent scans, ${}/M WRU, ${}/M RRU, 30-day month",
        model.renew_seconds,
        model.scan_seconds,
        model.fleet_poll_ms,
        model.item_bytes,
        model.write_price,
        model.read_price
    );
    let headers = [
        "streams",
        "workers",
        "renew WRU/s",
        "scan RRU/s",
        "fleet RRU/s",
        "member WRU+RRU/s",
        "renew $/mo",
        "scan $/mo",
        "fleet $/mo",
        "member $/mo",
        "total $/mo",
        "discovery % of renewals",
        "hottest item reads/s",
        "discovery units/stream/h",
    ];
    let rows = rows
        .iter()
        .map(|r| -> Vec<Cell> {
            let whole = [
                r.renew_wru_s,
                r.scan_rru_s,
                r.fleet_rru_s,
                r.member_wru_s + r.member_rru_s,
                r.renew_usd_month,
                r.scan_usd_month,
                r.fleet_usd_month,
                r.member_usd_month,
                r.total_usd_month,
            ];
            [r.streams.to_string(), r.workers.to_string()]
                .into_iter()
                .chain(whole.iter().map(|v| format!("{v:.0}")))
                .chain([
                    format!("{:.1}", r.discovery_pct_of_renewals),
                    format!("{:.0}", r.hottest_item_reads_s),
                    format!("{:.1}", r.discovery_rru_per_stream_hour),
                ])
                .map(Cell::from)
                .collect()
        })
        .collect();
    table_markdown(&Table {
        id: "cost",
        title: "DynamoDB cost model".to_string(),
        intro: Some(intro),
        headers: headers.iter().map(|h| h.to_string()).collect(),
        rows,
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        Model {
            renew_seconds: 10.0,
            scan_seconds: 10.0,
            fleet_poll_ms: 50,
            item_bytes: 200,
            write_price: 0.625,
            read_price: 0.125,
            discovery: Discovery::Full,
        }
    }

    #[test]
    fn a_hundred_thousand_streams_over_a_thousand_workers() {
        let r = model().row(100_000, 1_000);
        assert_eq!(r.renew_wru_s, 10_000.0);
        // 100,000 × 200 B = 20,000,000 B = 4,883 blocks of 4 KB at half a unit each (eventually
        // consistent), per worker per 10 s.
        assert_eq!(r.scan_rru_s, 244_150.0);
        // 1,000 workers at 50 ms would read the signal 20,000 times a second; their scans read
        // it 100 times a second, so their polls slow to 1.11 s: 900 a second.
        assert_eq!(r.fleet_rru_s, 450.0);
        assert_eq!(r.hottest_item_reads_s, 1_000.0);
        assert!((r.renew_usd_month - 16_200.0).abs() < 0.01, "{r:?}");
        assert!((r.scan_usd_month - 79_105.0).abs() < 1.0, "{r:?}");
        assert!((r.fleet_usd_month - 145.8).abs() < 0.01, "{r:?}");
        // A small fleet polls at the configured interval.
        assert_eq!(model().row(1_000, 10).hottest_item_reads_s, 201.0);
    }

    #[test]
    fn discovery_grows_with_workers_renewals_do_not() {
        let small = model().row(10_000, 10);
        let large = model().row(10_000, 1_000);
        assert_eq!(small.renew_wru_s, large.renew_wru_s);
        assert!(large.scan_rru_s > 99.0 * small.scan_rru_s);
        assert!(large.discovery_pct_of_renewals > small.discovery_pct_of_renewals);
    }

    #[test]
    fn segmented_discovery_is_flat_per_stream_and_within_ten_percent_of_renewals() {
        let seg = |streams, workers| {
            Model {
                discovery: Discovery::Segmented,
                ..model()
            }
            .row(streams, workers)
        };
        let r = seg(100_000, 1_000);
        // Three passes over 4,883 blocks at half a unit, per 10 s.
        assert!((r.scan_rru_s - 732.45).abs() < 0.01, "{r:?}");
        // 1,000 members of 150 B: 37 blocks, scanned by each worker per 10 s; one write each.
        assert_eq!((r.member_wru_s, r.member_rru_s), (100.0, 1_850.0));
        assert!(r.discovery_pct_of_renewals < 10.0, "{r:?}");
        assert_eq!(r.hottest_item_reads_s, 1_000.0);
        // Scans no longer grow with workers; membership does, slowly.
        let (w10, w100) = (seg(10_000, 10), seg(10_000, 100));
        assert_eq!(w10.scan_rru_s, w100.scan_rru_s);
        // One worker scans its one segment: the whole table once.
        assert_eq!(seg(10_000, 1).scan_rru_s, model().row(10_000, 1).scan_rru_s);
    }

    #[test]
    fn no_fleet_poll_reads_nothing() {
        let r = Model {
            fleet_poll_ms: 0,
            ..model()
        }
        .row(1_000, 10);
        // Nothing reads the signal on its own; the 10 workers' scans still read it once a second.
        assert_eq!((r.fleet_rru_s, r.hottest_item_reads_s), (0.0, 1.0));
    }

    #[test]
    fn bad_flags_name_the_flag_and_value() {
        let args = |f: fn(&mut CostArgs)| {
            let mut a = CostArgs {
                streams: vec![1_000],
                workers: vec![10],
                renew_seconds: 10.0,
                scan_seconds: None,
                fleet_poll_ms: 50,
                item_bytes: 200,
                write_price: 0.625,
                read_price: 0.125,
                discovery: Discovery::Full,
                json: false,
            };
            f(&mut a);
            a.model().unwrap_err()
        };
        assert!(args(|a| a.renew_seconds = 0.0).contains("--renew-seconds 0"));
        assert!(args(|a| a.scan_seconds = Some(-1.0)).contains("--scan-seconds -1"));
        assert!(args(|a| a.item_bytes = 0).contains("--item-bytes 0"));
        assert!(args(|a| a.workers = vec![0]).contains("--workers 0"));
        assert!(args(|a| a.read_price = f64::NAN).contains("--read-price NaN"));
    }
}
