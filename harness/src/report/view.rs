//! What the renderers draw, derived in one streaming pass over `history.jsonl` plus the
//! `report.json` beside it: who published each stream when (from the sink's receipts), accepted
//! events per second, the injected actions, the fault periods and who owned how many streams.
//! Everything is ordered (BTreeMap, sorted vectors) so the rendered files are reproducible.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{Outcome, OwnerSample, Record};
use crate::report_json::Report;

/// At most this many streams get a row in the timeline.
pub const MAX_TIMELINE_ROWS: usize = 60;
/// At most this many fenced receipts are kept per stream for the timeline's markers.
const MAX_FENCED_MARKS: usize = 64;
/// Step of the ownership series when it is derived from receipts (no `owner_sample` lines).
const DERIVED_OWNERSHIP_STEP_MS: u64 = 1000;

/// An unbroken stretch of a stream published by one owner under one fence token.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub owner: String,
    pub fence: u64,
    /// First and last receipt (accepted or duplicate) under this fence.
    pub start_ms: u64,
    pub end_ms: u64,
}

/// One injected action, as a marker on the time axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub t_ms: u64,
    pub action: String,
    pub target: String,
    pub fault: Option<usize>,
    pub streams: usize,
    /// The link a fault-menu action hit (`dynamodb`, `upstream`, `sink`).
    pub link: Option<String>,
}

/// A shaded stretch of time: a pause until its resume, or an injection until the last takeover
/// it caused.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPeriod {
    pub start_ms: u64,
    pub end_ms: u64,
    pub label: String,
    /// The link of a link, DynamoDB, upstream or sink fault: drawn in its own band.
    pub link: Option<String>,
}

/// Who held how many streams at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnershipPoint {
    pub t_ms: u64,
    pub owners: BTreeMap<String, usize>,
    pub free: usize,
}

/// Where the ownership series came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnershipSource {
    /// `owner_sample` lines: scans of the lease table.
    Table,
    /// Derived from the sink's receipts: who was publishing each stream.
    Receipts,
}

/// A takeover's latency next to its floor (the lease the fault left, plus the skew margin).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySample {
    pub takeover_ms: u64,
    /// `lease_remaining_ms + skew_margin_ms` for a crash or pause; 0 for a graceful handoff.
    pub floor_ms: u64,
}

/// Everything the charts and tables need beyond `report.json`.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The time axis runs from 0 to here.
    pub end_ms: u64,
    /// Every stream seen in a receipt, with its publishing segments in time order.
    pub segments: BTreeMap<String, Vec<Segment>>,
    /// Per stream, each owner's valid-lease intervals as the table showed them (from the lease
    /// timeline's `lease` records): from the grant to its release, its successor's grant or its
    /// last `lease_expires_at`, whichever came first. Empty for a history without them.
    pub leases: BTreeMap<String, Vec<Segment>>,
    /// Times of fenced receipts per stream (capped), for the zombie markers.
    pub fenced: BTreeMap<String, Vec<u64>>,
    /// Accepted, duplicate and fenced receipts per whole second since t0.
    pub accepted_per_s: Vec<u64>,
    pub duplicate_per_s: Vec<u64>,
    pub fenced_per_s: Vec<u64>,
    pub markers: Vec<Marker>,
    pub periods: Vec<FaultPeriod>,
    pub ownership: Vec<OwnershipPoint>,
    pub ownership_source: OwnershipSource,
    /// Every owner that appears anywhere, sorted: the colour of an owner is its index here.
    pub owners: Vec<String>,
    /// The timeline's rows: streams taken over or fenced first, then the rest, by id.
    pub timeline_rows: Vec<String>,
    /// How many streams there are in total (receipts, finals and config).
    pub stream_count: usize,
    pub latencies: Vec<LatencySample>,
    /// When the upstream stopped producing (the `production_stopped` phase), if recorded.
    pub production_stopped_ms: Option<u64>,
}

#[derive(Default)]
struct Builder {
    end_ms: u64,
    segments: BTreeMap<String, Vec<Segment>>,
    fenced: BTreeMap<String, Vec<u64>>,
    accepted_per_s: Vec<u64>,
    duplicate_per_s: Vec<u64>,
    fenced_per_s: Vec<u64>,
    markers: Vec<Marker>,
    samples: Vec<OwnerSample>,
    owners: BTreeSet<String>,
    finals: BTreeSet<String>,
    production_stopped_ms: Option<u64>,
    /// Unix ms of the run's t0 (from `run_start`), to place the table's expiries.
    wall_t0_ms: i64,
    leases: BTreeMap<String, Vec<Segment>>,
    /// Per stream, the lease open now: its interval so far and its expiry (run ms).
    open_leases: BTreeMap<String, (Segment, Option<u64>)>,
}

fn bump(series: &mut Vec<u64>, t_ms: u64) {
    let second = (t_ms / 1000) as usize;
    if series.len() <= second {
        series.resize(second + 1, 0);
    }
    series[second] += 1;
}

impl Builder {
    fn add(&mut self, record: Record) {
        if let Some(t) = record.t_ms() {
            self.end_ms = self.end_ms.max(t);
        }
        match record {
            Record::Receipt(r) => {
                self.owners.insert(r.owner_id.clone());
                if r.outcome == Outcome::Fenced {
                    bump(&mut self.fenced_per_s, r.t_ms);
                    let marks = self.fenced.entry(r.stream_id).or_default();
                    if marks.len() < MAX_FENCED_MARKS {
                        marks.push(r.t_ms);
                    }
                    return;
                }
                if r.outcome == Outcome::Accepted {
                    bump(&mut self.accepted_per_s, r.t_ms);
                } else {
                    bump(&mut self.duplicate_per_s, r.t_ms);
                }
                let segments = self.segments.entry(r.stream_id).or_default();
                match segments.last_mut() {
                    Some(s) if s.fence == r.fence_token && s.owner == r.owner_id => {
                        s.start_ms = s.start_ms.min(r.t_ms);
                        s.end_ms = s.end_ms.max(r.t_ms);
                    }
                    _ => segments.push(Segment {
                        owner: r.owner_id,
                        fence: r.fence_token,
                        start_ms: r.t_ms,
                        end_ms: r.t_ms,
                    }),
                }
            }
            // `ready` is what a rolling deploy waited for, not an injection: no marker.
            Record::Action(a) if a.action == "ready" => {}
            Record::Action(a) => self.markers.push(Marker {
                t_ms: a.t_ms,
                action: a.action,
                target: a.target,
                fault: a.fault,
                streams: a.streams.len(),
                link: a.link,
            }),
            Record::OwnerSample(s) => {
                self.owners.extend(s.owners.keys().cloned());
                self.samples.push(s);
            }
            Record::WorkerStart(w) => {
                self.owners.insert(w.worker);
            }
            Record::UpstreamFinal(u) => {
                self.finals.insert(u.stream_id);
            }
            Record::CheckpointFinal(c) => {
                self.finals.insert(c.stream_id);
            }
            Record::Phase(p) if p.phase == "production_stopped" => {
                self.production_stopped_ms.get_or_insert(p.t_ms);
            }
            Record::RunStart(s) => self.wall_t0_ms = s.wall_ms,
            Record::Lease(l) => {
                let expires = l
                    .lease_expires_at
                    .map(|e| e.saturating_sub(self.wall_t0_ms).max(0) as u64);
                let same = |(s, _): &(Segment, Option<u64>)| {
                    Some(&s.owner) == l.owner_id.as_ref() && Some(s.fence) == l.fence_token
                };
                match self.open_leases.get_mut(&l.stream_id) {
                    // A renewal (or a checkpoint) of the lease open now.
                    Some(open) if same(open) => open.1 = expires.or(open.1),
                    _ => {
                        self.close_lease(&l.stream_id, l.t_ms);
                        if let (Some(owner), Some(fence)) = (l.owner_id, l.fence_token) {
                            self.owners.insert(owner.clone());
                            let segment = Segment {
                                owner,
                                fence,
                                start_ms: l.t_ms,
                                end_ms: l.t_ms,
                            };
                            self.open_leases.insert(l.stream_id, (segment, expires));
                        }
                    }
                }
            }
            Record::Phase(_)
            | Record::WorkerExit(_)
            | Record::ContentMismatch(_)
            | Record::RunEnd(_) => {}
        }
    }

    /// Ends `stream`'s open lease at `t_ms`, or at its expiry if that came first.
    fn close_lease(&mut self, stream: &str, t_ms: u64) {
        if let Some((mut segment, expires)) = self.open_leases.remove(stream) {
            segment.end_ms = expires.map_or(t_ms, |e| e.min(t_ms)).max(segment.start_ms);
            self.leases
                .entry(stream.to_string())
                .or_default()
                .push(segment);
        }
    }
}

impl RunView {
    /// Builds the view from the history's records and the report computed from them.
    pub fn build(records: impl IntoIterator<Item = Record>, report: &Report) -> RunView {
        let mut b = Builder::default();
        for record in records {
            b.add(record);
        }
        b.markers.sort_by_key(|m| m.t_ms);
        b.samples.sort_by_key(|s| s.t_ms);
        let end_ms = b.end_ms.max(report.harness.wall_ms).max(1);
        let open: Vec<String> = b.open_leases.keys().cloned().collect();
        for stream in open {
            b.close_lease(&stream, end_ms);
        }
        let mut all_streams: BTreeSet<&String> = b.segments.keys().collect();
        all_streams.extend(b.finals.iter());
        let stream_count = all_streams.len().max(report.config.streams);
        let periods = fault_periods(&b.markers, report);
        let (ownership, ownership_source) = if b.samples.is_empty() {
            let points = derived_ownership(&b.segments, stream_count, end_ms);
            (points, OwnershipSource::Receipts)
        } else {
            let points = b
                .samples
                .iter()
                .map(|s| OwnershipPoint {
                    t_ms: s.t_ms,
                    owners: s.owners.clone(),
                    free: s.free,
                })
                .collect();
            (points, OwnershipSource::Table)
        };
        let timeline_rows = timeline_rows(&b.segments, &b.fenced, report);
        let latencies = report
            .takeovers
            .iter()
            .filter_map(|t| {
                let takeover_ms = t.takeover_ms?;
                let crash = matches!(t.cause.as_deref(), Some("kill") | Some("pause"));
                let floor_ms = if crash {
                    t.lease_remaining_ms.unwrap_or(0).max(0) as u64 + report.config.skew_margin_ms
                } else {
                    0
                };
                Some(LatencySample {
                    takeover_ms,
                    floor_ms,
                })
            })
            .collect();
        RunView {
            end_ms,
            owners: b.owners.into_iter().collect(),
            segments: b.segments,
            leases: b.leases,
            fenced: b.fenced,
            accepted_per_s: b.accepted_per_s,
            duplicate_per_s: b.duplicate_per_s,
            fenced_per_s: b.fenced_per_s,
            markers: b.markers,
            periods,
            ownership,
            ownership_source,
            timeline_rows,
            stream_count,
            latencies,
            production_stopped_ms: b.production_stopped_ms,
        }
    }

    /// The colour index of an owner (its position among all owners).
    pub fn owner_index(&self, owner: &str) -> usize {
        self.owners
            .binary_search_by(|o| o.as_str().cmp(owner))
            .unwrap_or(self.owners.len())
    }

    /// Who held how many streams at `t_ms`: the latest ownership point at or before it.
    pub fn ownership_at(&self, t_ms: u64) -> Option<&OwnershipPoint> {
        self.ownership.iter().take_while(|p| p.t_ms <= t_ms).last()
    }

    /// Scenario faults (actions grouped by fault index), each with its first injection time, in
    /// time order; harness-internal actions without an index are left out.
    pub fn faults(&self) -> Vec<(usize, u64, String)> {
        let mut seen: BTreeMap<usize, (u64, String)> = BTreeMap::new();
        for m in &self.markers {
            if let Some(i) = m.fault {
                seen.entry(i)
                    .or_insert_with(|| (m.t_ms, format!("{} {}", m.action, m.target)));
            }
        }
        let mut faults: Vec<_> = seen
            .into_iter()
            .map(|(i, (t, what))| (i, t, what))
            .collect();
        faults.sort_by_key(|f| (f.1, f.0));
        faults
    }
}

/// Shaded periods: each pause until the next resume of the same target, each fault-menu fault
/// until its `heal` (same fault index and target), and each action that caused takeovers until
/// the last of them (matched by `at_ms − takeover_ms` and cause).
fn fault_periods(markers: &[Marker], report: &Report) -> Vec<FaultPeriod> {
    let mut periods = Vec::new();
    for (i, m) in markers.iter().enumerate() {
        let mut end = m.t_ms;
        if m.action == "heal" {
            continue;
        }
        if m.action == "pause" {
            if let Some(resume) = markers[i + 1..]
                .iter()
                .find(|r| r.action == "resume" && r.target == m.target)
            {
                end = end.max(resume.t_ms);
            }
        }
        if m.link.is_some() {
            if let Some(heal) = markers[i + 1..].iter().find(|h| {
                h.action == "heal" && h.fault == m.fault && h.target == m.target && h.link == m.link
            }) {
                end = end.max(heal.t_ms);
            }
        }
        for t in &report.takeovers {
            let caused = t.cause.as_deref() == Some(m.action.as_str())
                && t.takeover_ms
                    .is_some_and(|ms| t.at_ms.saturating_sub(ms) == m.t_ms);
            if caused {
                end = end.max(t.at_ms);
            }
        }
        if end > m.t_ms {
            let label = match &m.link {
                Some(link) if link != &m.target => format!("{} {link} {}", m.action, m.target),
                _ => format!("{} {}", m.action, m.target),
            };
            periods.push(FaultPeriod {
                start_ms: m.t_ms,
                end_ms: end,
                label,
                link: m.link.clone(),
            });
        }
    }
    periods
}

/// Rows kept for streams no fault touched, for contrast, when there are that many.
const UNTOUCHED_ROWS: usize = 6;

/// Chooses the timeline's rows: streams taken over, round-robin over the actions that caused
/// the takeovers (so every fault shows) and the unexplained ones, with the streams that had
/// writes fenced as one more group; a few untouched streams for contrast; then anything left,
/// by id. At most [`MAX_TIMELINE_ROWS`], shown sorted by id.
fn timeline_rows(
    segments: &BTreeMap<String, Vec<Segment>>,
    fenced: &BTreeMap<String, Vec<u64>>,
    report: &Report,
) -> Vec<String> {
    // Groups keyed by the causing action (its injection time and kind), in time order.
    let mut groups: BTreeMap<(u64, String), Vec<&str>> = BTreeMap::new();
    for t in &report.takeovers {
        let key = match (t.takeover_ms, &t.cause) {
            (Some(ms), Some(cause)) => (t.at_ms.saturating_sub(ms), cause.clone()),
            _ => (u64::MAX, String::new()),
        };
        groups.entry(key).or_default().push(&t.stream_id);
    }
    let mut groups: Vec<Vec<&str>> = groups.into_values().collect();
    groups.push(fenced.keys().map(String::as_str).collect());
    let touched: BTreeSet<&str> = groups.iter().flatten().copied().collect();
    let untouched: Vec<&str> = segments
        .keys()
        .map(String::as_str)
        .filter(|id| !touched.contains(id))
        .collect();

    let reserve = UNTOUCHED_ROWS.min(untouched.len());
    let mut chosen: BTreeSet<&str> = BTreeSet::new();
    let mut cursors = vec![0usize; groups.len()];
    'rounds: loop {
        let mut progressed = false;
        for (group, cursor) in groups.iter().zip(cursors.iter_mut()) {
            if chosen.len() + reserve >= MAX_TIMELINE_ROWS {
                break 'rounds;
            }
            while let Some(id) = group.get(*cursor) {
                *cursor += 1;
                if chosen.insert(id) {
                    progressed = true;
                    break;
                }
            }
        }
        if !progressed {
            break;
        }
    }
    for id in untouched.iter().chain(
        segments
            .keys()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .iter(),
    ) {
        if chosen.len() >= MAX_TIMELINE_ROWS {
            break;
        }
        chosen.insert(id);
    }
    chosen.into_iter().map(str::to_string).collect()
}

/// Ownership from receipts: at each step, a stream belongs to the owner of its latest segment
/// started at or before then, until that segment's last receipt; otherwise it counts as free.
fn derived_ownership(
    segments: &BTreeMap<String, Vec<Segment>>,
    stream_count: usize,
    end_ms: u64,
) -> Vec<OwnershipPoint> {
    let mut points = Vec::new();
    let mut t = 0;
    while t <= end_ms {
        let mut owners: BTreeMap<String, usize> = BTreeMap::new();
        for list in segments.values() {
            let current = list.iter().take_while(|s| s.start_ms <= t).last();
            if let Some(s) = current.filter(|s| s.end_ms + DERIVED_OWNERSHIP_STEP_MS >= t) {
                *owners.entry(s.owner.clone()).or_default() += 1;
            }
        }
        let held: usize = owners.values().sum();
        points.push(OwnershipPoint {
            t_ms: t,
            owners,
            free: stream_count.saturating_sub(held),
        });
        t += DERIVED_OWNERSHIP_STEP_MS;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{LeaseChange, LeaseOp, RunStart};

    const WALL: i64 = 1_800_000_000_000;

    fn lease(
        t_ms: u64,
        op: LeaseOp,
        owner: Option<&str>,
        fence: u64,
        expires: Option<u64>,
    ) -> Record {
        Record::Lease(LeaseChange {
            t_ms,
            stream_id: "s-0001".into(),
            op,
            owner_id: owner.map(String::from),
            fence_token: Some(fence),
            lease_expires_at: expires.map(|e| WALL + e as i64),
            checkpoint: None,
            updated_at: None,
        })
    }

    /// Each owner's valid lease runs from its grant to its release, its successor's grant or
    /// its last expiry, whichever came first — here w-1 lapsed at 4.1 s (renewed once) and w-2
    /// took over at 5 s, then released at 6 s.
    #[test]
    fn lease_intervals_end_at_release_successor_or_expiry() {
        let records = vec![
            Record::RunStart(RunStart {
                wall_ms: WALL,
                ..RunStart::default()
            }),
            lease(100, LeaseOp::Acquire, Some("w-1"), 1, Some(3_100)),
            lease(1_100, LeaseOp::Renew, Some("w-1"), 1, Some(4_100)),
            lease(5_000, LeaseOp::Acquire, Some("w-2"), 2, Some(8_000)),
            lease(6_000, LeaseOp::Release, None, 2, None),
            lease(7_000, LeaseOp::Acquire, Some("w-3"), 3, Some(10_000)),
        ];
        let view = RunView::build(records, &Report::default());
        let got: Vec<(&str, u64, u64, u64)> = view.leases["s-0001"]
            .iter()
            .map(|s| (s.owner.as_str(), s.fence, s.start_ms, s.end_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("w-1", 1, 100, 4_100),
                ("w-2", 2, 5_000, 6_000),
                // Still open at the end of the history (7 s): closed there.
                ("w-3", 3, 7_000, 7_000),
            ]
        );
        assert!(view.owners.contains(&"w-3".to_string()));
    }
}
