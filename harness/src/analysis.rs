//! The verdict's arithmetic: a pure function from the records of `history.jsonl` to the figures
//! of `report.json` (design §5 definitions). It never looks at live state, so anyone holding a
//! history can recompute every figure.

use std::collections::HashMap;
use std::path::Path;

use hdrhistogram::Histogram;

use crate::history::{Action, LeaseOp, Outcome, Receipt, Record, WorkerExit};
use crate::report_json::{
    CheckpointAhead, FaultSummary, GapRange, HarnessStats, Percentiles, Report, ReportConfig,
    StreamStall, Takeover, WorkerCrash,
};

/// The phase that starts the fleet's final stop: every worker exit from then on is the
/// harness's doing. (Histories written before it existed fall back to `production_stopped`.)
pub const FLEET_STOP_PHASE: &str = "fleet_stopping";
/// Actions that end their target's process: its exit afterwards is the harness's doing.
const ENDING_ACTIONS: [&str; 2] = ["kill", "terminate"];
/// Bound on how far past the highest accepted seq a receipt may claim before the analysis
/// refuses to index it (a history edited by hand, or not from this harness's sink).
const MAX_SEQ_AHEAD: u64 = crate::sink::MAX_SEQ_AHEAD;

mod timeline;

/// How many of the longest stalls the report lists.
pub const LONGEST_STALLS: usize = 10;

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
    /// Ranges the upstream lost (its gap fault, first ..= last): never deliverable.
    lost: Vec<(u64, u64)>,
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

    /// Whether `seq` is inside a range the upstream lost.
    fn lost(&self, seq: u64) -> bool {
        self.lost
            .iter()
            .any(|(first, last)| (*first..=*last).contains(&seq))
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
    /// Fences each stream's owners released cleanly (a `release` lease change).
    released: HashMap<String, Vec<u64>>,
    takeover_ms: Vec<u64>,
    lease_remaining_ms: Vec<u64>,
    saw_end: bool,
    saw_start: bool,
    exits: Vec<WorkerExit>,
    timeline: Option<timeline::Timeline>,
    /// Workers an action ended (kill, terminate).
    ended: std::collections::HashSet<String>,
    fleet_stop_ms: Option<u64>,
    production_stopped_ms: Option<u64>,
    /// In a run with a warm-up ([`RunStart::warmup`]), before its `warmup_done`: owner
    /// changes now are the fleet balancing as it starts, not takeovers.
    cold: bool,
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
                self.cold = s.warmup;
                let stall_threshold_ms = s.stall_threshold_ms.unwrap_or(2 * s.lease_ms);
                self.timeline = Some(timeline::Timeline::new(s.wall_ms, stall_threshold_ms));
                self.report.lease_source = s.lease_source.clone();
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
                    stall_threshold_ms,
                };
            }
            Record::Receipt(r) => self.receipt(r),
            Record::Action(action) => {
                if ENDING_ACTIONS.contains(&action.action.as_str()) {
                    self.ended.insert(action.target.clone());
                }
                if let Some((stream, range)) = lost_range(&action) {
                    self.stream(&stream).lost.push(range);
                }
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
                if let Some(t) = &mut self.timeline {
                    t.known_stream(&u.stream_id);
                }
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
            Record::Phase(p) => match p.phase.as_str() {
                FLEET_STOP_PHASE => self.fleet_stop_ms = self.fleet_stop_ms.or(Some(p.t_ms)),
                "warmup_done" => {
                    self.cold = false;
                    if let Some(t) = &mut self.timeline {
                        t.window_start(p.t_ms);
                    }
                }
                "production_stopped" => {
                    self.production_stopped_ms = self.production_stopped_ms.or(Some(p.t_ms));
                    if let Some(t) = &mut self.timeline {
                        t.window_end(p.t_ms);
                    }
                }
                _ => {}
            },
            Record::Lease(l) => {
                if let (LeaseOp::Release, Some(fence)) = (&l.op, l.fence_token) {
                    self.released
                        .entry(l.stream_id.clone())
                        .or_default()
                        .push(fence);
                }
                if let Some(t) = &mut self.timeline {
                    t.lease(&l);
                }
            }
            Record::ContentMismatch(_) => self.report.totals.content_mismatches += 1,
            Record::WorkerExit(exit) => self.exits.push(exit),
            Record::WorkerStart(_) | Record::OwnerSample(_) => {}
        }
    }

    fn receipt(&mut self, r: Receipt) {
        if let Some(t) = &mut self.timeline {
            t.receipt(&r);
        }
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
        let reach = (state.accepted.len() as u64 * 64).saturating_add(MAX_SEQ_AHEAD);
        if r.seq > reach {
            let error = format!(
                "receipt of {} seq {} at t={} ms is beyond any seq the sink stores: not counted",
                r.stream_id, r.seq, r.t_ms
            );
            self.report.errors.push(error);
            return;
        }
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
        if self.cold {
            // The cold start balancing (a bid answered, an excess shed) before the warm-up
            // declared ownership settled: counted apart, not a takeover.
            self.report.totals.warmup_takeovers += 1;
            return;
        }
        let takeover = Takeover {
            stream_id: r.stream_id.clone(),
            from_owner: previous.0,
            to_owner: r.owner_id,
            from_fence: previous.1,
            to_fence: r.fence_token,
            at_ms: r.t_ms,
            ..Takeover::default()
        };
        self.report.totals.takeovers += 1;
        self.report.takeovers.push(takeover);
    }

    /// Names the fault that caused each takeover and times it from there, in history order.
    /// Done once the whole history is read: a clean release seen by the lease observer can be
    /// written after the new owner's first receipt (seed 1 run 63: 30 ms after it).
    fn attribute_takeovers(&mut self) {
        let mut takeovers = std::mem::take(&mut self.report.takeovers);
        for takeover in &mut takeovers {
            let stream = takeover.stream_id.as_str();
            let Some(i) = self.cause(
                stream,
                &takeover.from_owner,
                takeover.from_fence,
                takeover.at_ms,
            ) else {
                continue;
            };
            let (action, streams) = &self.actions[i];
            let (_, remaining) = streams[stream];
            let ms = takeover.at_ms.saturating_sub(action.t_ms);
            takeover.takeover_ms = Some(ms);
            takeover.lease_remaining_ms = Some(remaining);
            takeover.cause = Some(action.action.clone());
            takeover.fault = action.fault;
            self.takeover_ms.push(ms);
            self.lease_remaining_ms.push(remaining.max(0) as u64);
            self.used.entry(stream.to_string()).or_default().push(i);
            let summary = &mut self.report.faults[i];
            summary.takeovers += 1;
            summary.takeover_ms_max = summary.takeover_ms_max.max(Some(ms));
            self.report.totals.fault_takeovers += 1;
        }
        self.report.takeovers = takeovers;
    }

    /// The latest action at or before `t_ms` that listed `stream` and has not explained an
    /// earlier takeover of it; one that listed it under `from_fence` is preferred.
    fn cause(&self, stream: &str, from_owner: &str, from_fence: u64, t_ms: u64) -> Option<usize> {
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
        // An action that listed the stream under the fence that lost it; else one aimed at the
        // owner that lost it (which re-acquired since). Never an action on an earlier owner:
        // a stream handed back later (a bid answered after a heal) is no takeover that fault
        // caused (campaign seed 1 run 37 timed such a handover from a reset 7.8 s before).
        let latest = candidates()
            .find(|(_, (_, s))| s[stream].0 == from_fence)
            .or_else(|| candidates().find(|(_, (a, _))| a.target == from_owner))
            .map(|(i, _)| i)?;
        // A stream its owner released cleanly was handed over: only a terminate (a drain, a
        // deploy's stop) makes a worker release what it holds; after any other fault it was
        // a shed or a bid answered later — the fleet rebalancing, not that fault's takeover
        // (campaign seed 1 run 11 timed a shed to a newly started worker from an upstream
        // reset 3.4 s before, during which every renewal had gone through).
        let released = self
            .released
            .get(stream)
            .is_some_and(|fences| fences.contains(&from_fence));
        // A fault that took several actions (a terminate whose worker outlived its stop
        // timeout, then the SIGKILL) caused the takeover with its first: time it from there.
        let (first, _) = &self.actions[latest];
        let fence = self.actions[latest].1[stream].0;
        let chosen = candidates()
            .filter(|(_, (a, s))| {
                a.fault.is_some()
                    && a.fault == first.fault
                    && a.target == first.target
                    && s[stream].0 == fence
            })
            .map(|(i, _)| i)
            .min()
            .unwrap_or(latest);
        let terminated = [chosen, latest]
            .iter()
            .any(|&i| self.actions[i].0.action == "terminate");
        (!released || terminated).then_some(chosen)
    }

    /// Worker exits no action of the harness caused, in time order.
    fn crashes(&self) -> Vec<WorkerCrash> {
        let stop = self.fleet_stop_ms.or(self.production_stopped_ms);
        let mut crashes: Vec<WorkerCrash> = self
            .exits
            .iter()
            .filter(|e| !self.ended.contains(&e.worker) && stop.is_none_or(|s| e.t_ms < s))
            .map(|e| WorkerCrash {
                worker: e.worker.clone(),
                t_ms: e.t_ms,
                code: e.code,
                signal: e.signal,
                log_tail: e.log_tail.clone(),
            })
            .collect();
        crashes.sort_by_key(|c| c.t_ms);
        crashes
    }

    fn finish(mut self) -> Report {
        self.attribute_takeovers();
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
        if let Some(timeline) = self.timeline.take() {
            let f = timeline.finish();
            let totals = &mut self.report.totals;
            totals.late_writes = f.late_writes;
            totals.late_write_ms_max = f.late_write_ms_max;
            totals.expired_writes = f.expired_writes;
            totals.superseded_accepted = f.superseded_accepted;
            totals.max_stall_ms = f.max_stall_ms;
            totals.stalled_streams = f.stalled_streams;
            totals.unowned_ms_max = f.unowned_ms_max;
            let mut stalls = f.stalls;
            stalls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            stalls.truncate(LONGEST_STALLS);
            self.report.longest_stalls = stalls
                .into_iter()
                .map(|(stream_id, stall_ms)| StreamStall {
                    stream_id,
                    stall_ms,
                })
                .collect();
        }
        self.report.worker_crashes = self.crashes();
        self.report.totals.worker_crashes = self.report.worker_crashes.len() as u64;
        let mut ids: Vec<&String> = self.streams.keys().collect();
        ids.sort();
        let totals = &mut self.report.totals;
        for id in ids {
            let state = &self.streams[id];
            let high_water = state.high_water();
            // What the stream has caught up to when the upstream's lost events never come.
            let caught_up =
                crate::sink::high_water_past(high_water, |seq| state.has(seq), &state.lost);
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
                    totals.upstream_lost += (from..seq).filter(|q| state.lost(*q)).count() as u64;
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
                if checkpoint > caught_up {
                    totals.checkpoint_ahead += 1;
                    self.report.checkpoint_ahead_streams.push(CheckpointAhead {
                        stream_id: id.clone(),
                        checkpoint,
                        accepted_high_water: caught_up,
                    });
                }
            }
        }
        totals.gaps_unexplained = totals.gaps - totals.upstream_lost;
        totals.takeover_ms = percentiles(&self.takeover_ms);
        totals.lease_remaining_ms = percentiles(&self.lease_remaining_ms);
        self.report
    }
}

/// The stream and range (first ..= last) an `upstream_gap` action lost, from its detail.
fn lost_range(action: &Action) -> Option<(String, (u64, u64))> {
    if action.action != "upstream_gap" {
        return None;
    }
    let detail = action.detail.as_ref()?;
    let stream = detail.get("stream_id")?.as_str()?.to_string();
    let first = detail.get("lost_from")?.as_u64()?;
    let last = detail.get("lost_to")?.as_u64()?;
    Some((stream, (first, last)))
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
