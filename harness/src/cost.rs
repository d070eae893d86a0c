//! `harness cost`: what the lease machinery costs on DynamoDB on-demand, from the worker's
//! settings, for fleets too large to run here (100,000 streams, 1,000 workers).
//!
//! A pure model of the requests `lease-worker` makes (lease-table/src): one conditional
//! `UpdateItem` per held stream per renew interval (1 WRU: items are under 1 KB), one full
//! strongly consistent `Scan` per worker per scan interval (1 RRU per 4 KB read), one eventually
//! consistent `GetItem` of the fleet signal per worker per poll (0.5 RRU; the poll slows as the
//! fleet grows so that the whole fleet reads it at most `lease_table::FLEET_READS_PER_SECOND`
//! times a second). Checkpoints and
//! takeovers are left out: they scale with traffic and faults, not with the fleet's size. The
//! takeover bench (`harness bench takeover`) measures the same counts on a real table.

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
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

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
    /// USD per 30-day month, each part and the total.
    pub renew_usd_month: f64,
    pub scan_usd_month: f64,
    pub fleet_usd_month: f64,
    pub total_usd_month: f64,
    /// Reads per second of the single hottest item (the fleet signal; DynamoDB serves about
    /// 3,000 RRU/s per partition, so far above that it is throttled).
    pub hottest_item_reads_s: f64,
    /// Discovery (scans + fleet reads) RRU per stream per hour.
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
}

const MONTH_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

impl Model {
    /// Prices `streams` over `workers`.
    pub fn row(&self, streams: u64, workers: u64) -> Row {
        let renew_wru_s = streams as f64 / self.renew_seconds;
        let scan_rru = (streams * self.item_bytes).div_ceil(4096) as f64;
        let scan_rru_s = workers as f64 * scan_rru / self.scan_seconds;
        // Each worker's poll interval grows with the fleet, so that the whole fleet reads the
        // signal at most `FLEET_READS_PER_SECOND` times a second (worker `fleet_poll_for`).
        let fleet_reads_s = if self.fleet_poll_ms == 0 {
            0.0
        } else {
            (workers as f64 * 1000.0 / self.fleet_poll_ms as f64)
                .min(f64::from(lease_table::FLEET_READS_PER_SECOND))
        };
        let fleet_rru_s = fleet_reads_s * 0.5;
        let month = |units_s: f64, price: f64| units_s * MONTH_SECONDS * price / 1e6;
        let renew_usd_month = month(renew_wru_s, self.write_price);
        let scan_usd_month = month(scan_rru_s, self.read_price);
        let fleet_usd_month = month(fleet_rru_s, self.read_price);
        let discovery_rru_s = scan_rru_s + fleet_rru_s;
        Row {
            streams,
            workers,
            renew_wru_s,
            scan_rru_s,
            fleet_rru_s,
            renew_usd_month,
            scan_usd_month,
            fleet_usd_month,
            total_usd_month: renew_usd_month + scan_usd_month + fleet_usd_month,
            hottest_item_reads_s: fleet_reads_s,
            discovery_rru_per_stream_hour: if streams == 0 {
                0.0
            } else {
                discovery_rru_s * 3600.0 / streams as f64
            },
            discovery_pct_of_renewals: if renew_usd_month == 0.0 {
                0.0
            } else {
                100.0 * (scan_usd_month + fleet_usd_month) / renew_usd_month
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
    let intro = format!(
        "DynamoDB on-demand, renew {} s, scan {} s, fleet poll {} ms, {} B items, \
         ${}/M WRU, ${}/M RRU, 30-day month",
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
        "renew $/mo",
        "scan $/mo",
        "fleet $/mo",
        "total $/mo",
        "hottest item reads/s",
        "discovery RRU/stream/h",
    ];
    let rows = rows
        .iter()
        .map(|r| -> Vec<Cell> {
            let whole = [
                r.renew_wru_s,
                r.scan_rru_s,
                r.fleet_rru_s,
                r.renew_usd_month,
                r.scan_usd_month,
                r.fleet_usd_month,
                r.total_usd_month,
                r.hottest_item_reads_s,
            ];
            [r.streams.to_string(), r.workers.to_string()]
                .into_iter()
                .chain(whole.iter().map(|v| format!("{v:.0}")))
                .chain([format!("{:.1}", r.discovery_rru_per_stream_hour)])
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
        }
    }

    #[test]
    fn a_hundred_thousand_streams_over_a_thousand_workers() {
        let r = model().row(100_000, 1_000);
        assert_eq!(r.renew_wru_s, 10_000.0);
        // 100,000 × 200 B = 20,000,000 B = 4,883 pages of 4 KB, per worker per 10 s.
        assert_eq!(r.scan_rru_s, 488_300.0);
        // 1,000 workers at 50 ms would read the signal 20,000 times a second; their polls slow
        // to 1 s, so the fleet reads it 1,000 times a second.
        assert_eq!(r.fleet_rru_s, 500.0);
        assert_eq!(r.hottest_item_reads_s, 1_000.0);
        assert!((r.renew_usd_month - 16_200.0).abs() < 0.01, "{r:?}");
        assert!((r.scan_usd_month - 158_210.0).abs() < 1.0, "{r:?}");
        assert!((r.fleet_usd_month - 162.0).abs() < 0.01, "{r:?}");
        // A small fleet polls at the configured interval.
        assert_eq!(model().row(1_000, 10).hottest_item_reads_s, 200.0);
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
    fn no_fleet_poll_reads_nothing() {
        let r = Model {
            fleet_poll_ms: 0,
            ..model()
        }
        .row(1_000, 10);
        assert_eq!((r.fleet_rru_s, r.hottest_item_reads_s), (0.0, 0.0));
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
