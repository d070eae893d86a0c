//! The verdict's arithmetic: a pure function from the records of `history.jsonl` to the figures
//! of `report.json` (design §5 definitions). It never looks at live state, so anyone holding a
//! history can recompute every figure.

use std::collections::HashMap;
use std::path::Path;

use hdrhistogram::Histogram;

use crate::history::{Action, Outcome, Receipt, Record};
use crate::report_json::{
    CheckpointAhead, FaultSummary, GapRange, HarnessStats, Percentiles, Report, ReportConfig,
    Takeover,
};

/// How many gap ranges the report lists (the count in `totals.gaps` is always complete).
pub const MAX_GAP_RANGES: usize = 100;

/// Computes the report's figures from a history. Expectations are left empty and `passed`
/// false: see [`crate::expect::judge`].
pub fn analyse(records: impl IntoIterator<Item = Record>) -> Report {
    let mut a = Analyser::default();
    for record in records {
        a.add(record);
    }
    a.finish()
}

/// Recomputes a report from a `history.jsonl` (expectations not yet judged).
pub fn analyse_file(path: &Path) -> anyhow::Result<Report> {
    let records: anyhow::Result<Vec<Record>> = crate::history::read(path)?.collect();
    Ok(analyse_records(records?))
}

/// The report of a history's records: the analysis's figures, plus the versions and the
/// scenario text its `run_start` carries. Expectations are not yet judged.
pub fn analyse_records(records: Vec<Record>) -> Report {
    let start = records.iter().find_map(|r| match r {
        Record::RunStart(start) => Some(start.clone()),
        _ => None,
    });
    let mut report = analyse(records);
    if let Some(start) = start {
        report.set_provenance(&start);
    }
    report
}

/// Per-stream state while reading the history.
#[derive(Default)]
struct StreamState {
    /// Bit `seq` set when `seq` was accepted.
    accepted: Vec<u64>,
    max_accepted_fence: Option<u64>,
    /// The owner and fence of the latest accepted ownership.
    owner: Option<(String, u64)>,
    last_seq: Option<u64>,
    checkpoint: Option<u64>,
}

impl StreamState {
    fn set(&mut self, seq: u64) {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if self.accepted.len() <= word {
            self.accepted.resize(word + 1, 0);
        }
        self.accepted[word] |= 1 << bit;
    }

    fn has(&self, seq: u64) -> bool {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        self.accepted.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Highest `h` such that `1..=h` were all accepted.
    fn high_water(&self) -> u64 {
        let mut seq = 1;
        while self.has(seq) {
            seq += 1;
        }
        seq - 1
    }
}

/// An action's streams: stream id → (fence token, lease remaining ms).
type StreamIndex = HashMap<String, (u64, i64)>;

#[derive(Default)]
struct Analyser {
    report: Report,
    streams: HashMap<String, StreamState>,
    /// Actions in history order, each with its streams indexed.
    actions: Vec<(Action, StreamIndex)>,
    /// (stream, action index) pairs already used to explain a takeover.
    used: HashMap<String, Vec<usize>>,
    takeover_ms: Vec<u64>,
    lease_remaining_ms: Vec<u64>,
    saw_end: bool,
    saw_start: bool,
}

impl Analyser {
    fn stream(&mut self, id: &str) -> &mut StreamState {
        if !self.streams.contains_key(id) {
            self.streams.insert(id.to_string(), StreamState::default());
        }
        self.streams.get_mut(id).expect("inserted above")
    }

    fn add(&mut self, record: Record) {
        match record {
            Record::RunStart(s) => {
                self.saw_start = true;
                self.report.scenario = s.scenario;
                self.report.description = s.description;
                self.report.config = ReportConfig {
                    lease_ms: s.lease_ms,
                    renew_ms: s.renew_ms,
                    skew_margin_ms: s.skew_margin_ms,
                    workers: s.workers,
                    streams: s.streams,
                    rate: s.rate,
                    seed: s.seed,
                    duration_ms: s.duration_ms,
                    fencing: s.fencing,
                    started_at_ms: s.wall_ms,
                };
            }
            Record::Receipt(r) => self.receipt(r),
            Record::Action(action) => {
                let index = action
                    .streams
                    .iter()
                    .map(|s| (s.stream_id.clone(), (s.fence_token, s.lease_remaining_ms)))
                    .collect();
                self.report.faults.push(FaultSummary {
                    fault: action.fault,
                    action: action.action.clone(),
                    target: action.target.clone(),
                    t_ms: action.t_ms,
                    streams_owned: action.streams.len(),
                    takeovers: 0,
                    takeover_ms_max: None,
                });
                self.actions.push((action, index));
            }
            Record::UpstreamFinal(u) => {
                self.stream(&u.stream_id).last_seq = Some(u.last_seq);
            }
            Record::CheckpointFinal(c) => {
                self.stream(&c.stream_id).checkpoint = c.checkpoint;
            }
            Record::RunEnd(end) => {
                self.saw_end = true;
                self.report.errors.extend(end.errors);
                let seconds = end.t_ms as f64 / 1000.0;
                self.report.harness = HarnessStats {
                    wall_ms: end.t_ms,
                    cpu_ms: end.harness_cpu_ms,
                    max_rss_bytes: end.harness_max_rss_bytes,
                    receipts: end.receipts,
                    receipts_per_s: if seconds > 0.0 {
                        end.receipts as f64 / seconds
                    } else {
                        0.0
                    },
                };
            }
            Record::Phase(_)
            | Record::WorkerStart(_)
            | Record::WorkerExit(_)
            | Record::OwnerSample(_) => {}
        }
    }

    fn receipt(&mut self, r: Receipt) {
        let totals = &mut self.report.totals;
        match r.outcome {
            Outcome::Duplicate => {
                totals.duplicates += 1;
                return;
            }
            Outcome::Fenced => {
                totals.stale_rejected += 1;
                *self.report.fenced_by_owner.entry(r.owner_id).or_default() += 1;
                return;
            }
            Outcome::Accepted => totals.events_accepted += 1,
        }
        let state = self.stream(&r.stream_id);
        state.set(r.seq);
        if state
            .max_accepted_fence
            .is_some_and(|max| r.fence_token < max)
        {
            self.report.totals.stale_accepted += 1;
            return;
        }
        state.max_accepted_fence = Some(r.fence_token);
        let previous = match &state.owner {
            None => {
                state.owner = Some((r.owner_id, r.fence_token));
                return;
            }
            Some((owner, fence)) if r.fence_token > *fence => (owner.clone(), *fence),
            Some(_) => return,
        };
        state.owner = Some((r.owner_id.clone(), r.fence_token));
        if previous.0 == r.owner_id {
            return; // the same owner re-acquired: no change of hands
        }
        let mut takeover = Takeover {
            stream_id: r.stream_id.clone(),
            from_owner: previous.0,
            to_owner: r.owner_id,
            from_fence: previous.1,
            to_fence: r.fence_token,
            at_ms: r.t_ms,
            ..Takeover::default()
        };
        if let Some(i) = self.cause(&r.stream_id, previous.1, r.t_ms) {
            let (action, streams) = &self.actions[i];
            let (_, remaining) = streams[&r.stream_id];
            let ms = r.t_ms.saturating_sub(action.t_ms);
            takeover.takeover_ms = Some(ms);
            takeover.lease_remaining_ms = Some(remaining);
            takeover.cause = Some(action.action.clone());
            takeover.fault = action.fault;
            self.takeover_ms.push(ms);
            self.lease_remaining_ms.push(remaining.max(0) as u64);
            self.used.entry(r.stream_id.clone()).or_default().push(i);
            let summary = &mut self.report.faults[i];
            summary.takeovers += 1;
            summary.takeover_ms_max = summary.takeover_ms_max.max(Some(ms));
            self.report.totals.fault_takeovers += 1;
        }
        self.report.totals.takeovers += 1;
        self.report.takeovers.push(takeover);
    }

    /// The latest action at or before `t_ms` that listed `stream` and has not explained an
    /// earlier takeover of it; one that listed it under `from_fence` is preferred.
    fn cause(&self, stream: &str, from_fence: u64, t_ms: u64) -> Option<usize> {
        let used = self.used.get(stream);
        let candidates = || {
            self.actions
                .iter()
                .enumerate()
                .rev()
                .filter(move |(i, (a, s))| {
                    a.t_ms <= t_ms && s.contains_key(stream) && !used.is_some_and(|u| u.contains(i))
                })
        };
        candidates()
            .find(|(_, (_, s))| s[stream].0 == from_fence)
            .or_else(|| candidates().next())
            .map(|(i, _)| i)
    }

    fn finish(mut self) -> Report {
        if !self.saw_start {
            self.report
                .errors
                .push("history has no run_start record".to_string());
        }
        if !self.saw_end {
            self.report
                .errors
                .push("history has no run_end record: the run did not complete".to_string());
        }
        let mut ids: Vec<&String> = self.streams.keys().collect();
        ids.sort();
        let totals = &mut self.report.totals;
        for id in ids {
            let state = &self.streams[id];
            let high_water = state.high_water();
            if let Some(last) = state.last_seq {
                totals.events_produced += last;
                let mut seq = high_water + 1;
                while seq <= last {
                    if state.has(seq) {
                        seq += 1;
                        continue;
                    }
                    let from = seq;
                    while seq <= last && !state.has(seq) {
                        seq += 1;
                    }
                    totals.gaps += seq - from;
                    if self.report.gap_ranges.len() < MAX_GAP_RANGES {
                        self.report.gap_ranges.push(GapRange {
                            stream_id: id.clone(),
                            from,
                            to: seq - 1,
                        });
                    }
                }
            }
            if let Some(checkpoint) = state.checkpoint {
                if checkpoint > high_water {
                    totals.checkpoint_ahead += 1;
                    self.report.checkpoint_ahead_streams.push(CheckpointAhead {
                        stream_id: id.clone(),
                        checkpoint,
                        accepted_high_water: high_water,
                    });
                }
            }
        }
        totals.takeover_ms = percentiles(&self.takeover_ms);
        totals.lease_remaining_ms = percentiles(&self.lease_remaining_ms);
        self.report
    }
}

/// p50 / p99 / max of `samples` (hdrhistogram, 3 significant digits); nulls when empty.
pub fn percentiles(samples: &[u64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    // Up to a day in milliseconds at 3 significant digits; larger values saturate.
    let mut h = Histogram::<u64>::new_with_bounds(1, 86_400_000, 3).expect("bounds are valid");
    for &s in samples {
        h.saturating_record(s);
    }
    // hdrhistogram answers with a bucket's highest equivalent value: report the exact maximum
    // and keep the percentiles at or below it.
    let max = samples.iter().copied().max().unwrap_or(0);
    Percentiles {
        p50: Some(h.value_at_quantile(0.5).min(max)),
        p99: Some(h.value_at_quantile(0.99).min(max)),
        max: Some(max),
        count: samples.len() as u64,
    }
}

#[cfg(test)]
mod tests;
