//! A synthetic run for the report tests: `streams` streams spread over three workers, worker-2
//! SIGKILLed at 15 s (its streams taken over once their leases ran out, with a replay from the
//! checkpoint that repeats a few events), worker-1 paused from 22 s to 27 s (its streams taken
//! over by worker-3; on resume its stale writes are fenced), table scans every second. The
//! report comes from the harness's own analysis and judge, so the fixture is consistent.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use harness::expect::judge;
use harness::history::{
    Action, ActionStream, CheckpointFinal, Outcome, OwnerSample, Phase, Receipt, Record, RunEnd,
    RunStart, UpstreamFinal, Versions, WorkerStart,
};
use harness::report_json::Report;
use harness::scenario::{Expectation, Op};

pub const LEASE_MS: u64 = 3000;
/// The scenario text the synthetic run records: markup and quotes that must come out escaped.
pub const SCENARIO_TEXT: &str = "# synthetic <kill> & \"pause\"\nname = \"synthetic-kill-and-pause\"\n\n[run]\nseed = 7 # <script>alert(1)</script>\n";
/// The versions the synthetic run records.
pub fn versions() -> Versions {
    Versions {
        harness: "0.1.0-test".into(),
        worker: Some("lease-worker 0.1.0-test".into()),
        worker_error: None,
        dynamodb: None,
    }
}
pub const SKEW_MS: u64 = 200;
const START_MS: u64 = 1000;
const STOP_MS: u64 = 30_000;
const KILL_MS: u64 = 15_000;
const PAUSE_MS: u64 = 22_000;
const RESUME_MS: u64 = 27_000;

/// One stretch of ownership: from `start` (first publish) the stream belongs to `owner` under
/// `fence`; `dead_from` is when that owner stopped publishing (its fault).
#[derive(Clone)]
struct Hold {
    start: u64,
    owner: String,
    fence: u64,
    remaining_at_fault: i64,
}

fn worker(n: usize) -> String {
    format!("worker-{n}")
}

/// The records of the synthetic run, in time order. `period_ms`: one event per stream per period.
pub fn history(streams: usize, period_ms: u64) -> Vec<Record> {
    let ids: Vec<String> = (1..=streams).map(|i| format!("s-{i:04}")).collect();
    let mut timed: Vec<(u64, usize, Record)> = Vec::new();
    let mut order = 0usize;
    let mut push = |t: u64, r: Record, timed: &mut Vec<(u64, usize, Record)>| {
        order += 1;
        timed.push((t, order, r));
    };
    let seq_at = |t: u64| (t - START_MS) / period_ms + 1;
    let last_seq = seq_at(STOP_MS);

    // Ownership schedule per stream.
    let mut schedules: Vec<Vec<Hold>> = Vec::new();
    let mut kill_streams = Vec::new();
    let mut pause_streams = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut holds = vec![Hold {
            start: START_MS,
            owner: worker(i % 3 + 1),
            fence: 1,
            remaining_at_fault: 0,
        }];
        if i % 3 == 1 {
            let remaining = 400 + (i as i64 * 37) % 2500;
            kill_streams.push(ActionStream {
                stream_id: id.clone(),
                fence_token: 1,
                lease_remaining_ms: remaining,
            });
            holds[0].remaining_at_fault = remaining;
            let to = if (i / 3) % 2 == 0 { 1 } else { 3 };
            holds.push(Hold {
                start: KILL_MS + remaining as u64 + SKEW_MS + 150 + (i as u64 % 5) * 20,
                owner: worker(to),
                fence: 2,
                remaining_at_fault: 0,
            });
        }
        let current = holds.last().expect("one hold").clone();
        if current.owner == "worker-1" && current.start < PAUSE_MS {
            let remaining = 300 + (i as i64 * 53) % 2600;
            pause_streams.push(ActionStream {
                stream_id: id.clone(),
                fence_token: current.fence,
                lease_remaining_ms: remaining,
            });
            holds.last_mut().expect("one hold").remaining_at_fault = remaining;
            holds.push(Hold {
                start: PAUSE_MS + remaining as u64 + SKEW_MS + 120 + (i as u64 % 7) * 15,
                owner: worker(3),
                fence: current.fence + 1,
                remaining_at_fault: 0,
            });
        }
        schedules.push(holds);
    }

    // Receipts.
    for (i, id) in ids.iter().enumerate() {
        let holds = &schedules[i];
        let mut delivered = 0u64;
        let receipt = |t: u64, seq: u64, hold: &Hold, outcome: Outcome| {
            Record::Receipt(Receipt {
                t_ms: t,
                stream_id: id.clone(),
                seq,
                fence_token: hold.fence,
                owner_id: hold.owner.clone(),
                outcome,
            })
        };
        for (k, hold) in holds.iter().enumerate() {
            let fault_at = match holds.get(k + 1) {
                Some(_) if hold.owner == "worker-2" => KILL_MS,
                Some(_) => PAUSE_MS,
                None => u64::MAX,
            };
            let end = holds.get(k + 1).map_or(STOP_MS + 1, |next| next.start);
            if k > 0 {
                // Replay from the checkpoint: the last two delivered events again, then the rest.
                for seq in delivered.saturating_sub(1).max(1)..=delivered {
                    push(
                        hold.start,
                        receipt(hold.start, seq, hold, Outcome::Duplicate),
                        &mut timed,
                    );
                }
                let now = seq_at(hold.start);
                for seq in delivered + 1..=now {
                    push(
                        hold.start,
                        receipt(hold.start, seq, hold, Outcome::Accepted),
                        &mut timed,
                    );
                }
                delivered = delivered.max(now);
            }
            let mut t = START_MS + delivered * period_ms;
            while t < end.min(fault_at) && t <= STOP_MS {
                let seq = seq_at(t);
                if seq > delivered {
                    push(t, receipt(t, seq, hold, Outcome::Accepted), &mut timed);
                    delivered = seq;
                }
                t += period_ms;
            }
            if fault_at == PAUSE_MS && holds.get(k + 1).is_some() {
                // The paused zombie wakes up and tries to publish under its old token.
                for seq in delivered + 1..=delivered + 2 {
                    push(
                        RESUME_MS + 40,
                        receipt(RESUME_MS + 40, seq, hold, Outcome::Fenced),
                        &mut timed,
                    );
                }
            }
        }
        push(
            STOP_MS + 1500,
            Record::UpstreamFinal(UpstreamFinal {
                stream_id: id.clone(),
                last_seq,
            }),
            &mut timed,
        );
        let last = holds.last().expect("one hold");
        push(
            STOP_MS + 1500,
            Record::CheckpointFinal(CheckpointFinal {
                stream_id: id.clone(),
                owner_id: Some(last.owner.clone()),
                fence_token: Some(last.fence),
                checkpoint: Some(last_seq - 1),
            }),
            &mut timed,
        );
    }

    // Table scans every second.
    let mut t = 0;
    while t <= STOP_MS + 1000 {
        let mut owners: BTreeMap<String, usize> = BTreeMap::new();
        let mut free = 0;
        for holds in &schedules {
            let k = holds.iter().rposition(|h| h.start <= t);
            match k {
                None => free += 1,
                Some(k) => {
                    let h = &holds[k];
                    let fault_at = if h.owner == "worker-2" {
                        KILL_MS
                    } else {
                        PAUSE_MS
                    };
                    let expired =
                        holds.get(k + 1).is_some() && t >= fault_at + h.remaining_at_fault as u64;
                    if expired {
                        free += 1;
                    } else {
                        *owners.entry(h.owner.clone()).or_default() += 1;
                    }
                }
            }
        }
        push(
            t,
            Record::OwnerSample(OwnerSample {
                t_ms: t,
                owners,
                free,
            }),
            &mut timed,
        );
        t += 1000;
    }

    push(
        0,
        Record::RunStart(RunStart {
            t_ms: 0,
            wall_ms: 1_764_670_000_000,
            scenario: "synthetic-kill-and-pause".into(),
            description: "Synthetic: SIGKILL worker-2, then pause worker-1 past its lease.".into(),
            seed: 7,
            lease_ms: LEASE_MS,
            renew_ms: 1000,
            skew_margin_ms: SKEW_MS,
            workers: 3,
            streams,
            rate: 1000.0 / period_ms as f64,
            duration_ms: STOP_MS - START_MS,
            fencing: true,
            versions: versions(),
            scenario_text: SCENARIO_TEXT.into(),
            lease_source: None,
            stall_threshold_ms: None,
            warmup: false,
        }),
        &mut timed,
    );
    for n in 1..=3 {
        push(
            100,
            Record::WorkerStart(WorkerStart {
                t_ms: 100,
                worker: worker(n),
                pid: 1000 + n as u32,
            }),
            &mut timed,
        );
    }
    push(START_MS, phase(START_MS, "warmup_done"), &mut timed);
    let action =
        |t_ms: u64, action: &str, target: &str, fault: usize, streams: Vec<ActionStream>| {
            Record::Action(Action {
                t_ms,
                action: action.into(),
                target: target.into(),
                fault: Some(fault),
                streams,
                ..Action::default()
            })
        };
    push(
        KILL_MS,
        action(KILL_MS, "kill", "worker-2", 0, kill_streams),
        &mut timed,
    );
    push(
        PAUSE_MS,
        action(PAUSE_MS, "pause", "worker-1", 1, pause_streams),
        &mut timed,
    );
    push(
        RESUME_MS,
        action(RESUME_MS, "resume", "worker-1", 1, Vec::new()),
        &mut timed,
    );
    push(STOP_MS, phase(STOP_MS, "production_stopped"), &mut timed);
    push(
        STOP_MS + 2000,
        Record::RunEnd(RunEnd {
            t_ms: STOP_MS + 2000,
            errors: Vec::new(),
            receipts: 0,
            harness_cpu_ms: 4200,
            harness_max_rss_bytes: 48 << 20,
        }),
        &mut timed,
    );
    timed.sort_by_key(|(t, order, _)| (*t, *order));
    timed.into_iter().map(|(_, _, r)| r).collect()
}

fn phase(t_ms: u64, name: &str) -> Record {
    Record::Phase(Phase {
        t_ms,
        phase: name.into(),
        detail: None,
    })
}

/// The expectations a task-kill scenario states; with `failing`, one more that cannot hold
/// (every takeover within 1 s of a 3 s lease).
pub fn expectations(failing: bool) -> Vec<Expectation> {
    let e = |name: &str, metric: &str, op: Op, expr: &str, threshold: f64| Expectation {
        name: name.into(),
        metric: metric.into(),
        op,
        threshold_expr: expr.into(),
        threshold,
    };
    let mut list = vec![
        e("no gap", "totals.gaps", Op::Eq, "0", 0.0),
        e(
            "no stale write accepted",
            "totals.stale_accepted",
            Op::Eq,
            "0",
            0.0,
        ),
        e(
            "a takeover after the fault",
            "totals.fault_takeovers",
            Op::Ge,
            "1",
            1.0,
        ),
        e(
            "every takeover within the lease plus 1.5 s",
            "totals.takeover_ms.max",
            Op::Le,
            "lease_ms + 1500",
            (LEASE_MS + 1500) as f64,
        ),
    ];
    if failing {
        list.push(e(
            "every takeover within 1 s",
            "totals.takeover_ms.p99",
            Op::Le,
            "1000",
            1000.0,
        ));
    }
    list
}

/// Writes `history.jsonl` and `report.json` into `dir` and returns the report.
pub fn write_run(dir: &Path, records: &[Record], failing: bool) -> Report {
    let mut lines = String::new();
    for r in records {
        lines.push_str(&serde_json::to_string(r).expect("a record serialises"));
        lines.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), lines).expect("write history");
    let mut report = harness::analysis::analyse_records(records.to_vec());
    judge(&mut report, &expectations(failing));
    report
        .write(&dir.join("report.json"))
        .expect("write report");
    report
}

/// The value of `attr="…"` on the element whose start tag contains `marker`
/// (e.g. `data-chart="timeline"`).
pub fn attr_of(html: &str, marker: &str, attr: &str) -> Option<String> {
    let at = html.find(marker)?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    let tag = &html[start..end];
    let key = format!(" {attr}=\"");
    let from = tag.find(&key)? + key.len();
    let len = tag[from..].find('"')?;
    Some(tag[from..from + len].to_string())
}
