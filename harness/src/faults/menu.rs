//! Injecting the fault menu beyond signals: link and DynamoDB faults on the target's proxies,
//! clock steps, upstream knobs, sink faults. Each fault is recorded as an `action` line (with
//! its `link`, its parameters in `detail` and, for a worker target, what it owned), and a fault
//! with a period ends with a `heal` line of the same fault index: after its duration, at an
//! explicit `heal`, or at the end of the run (before the settle), whichever comes first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_table::LeaseItem;
use mock_upstream::UpstreamControl;
use serde_json::json;

use super::clock::Clocks;
use super::links::Links;
use super::proxy::{Applied, Proxy};
use super::sink_hook::SinkFaults;
use super::{owned_by, Injector};
use crate::fleet::State;
use crate::history::{Action, Record};
use crate::scenario::menu::{
    DdbFault, DdbFaultKind, Direction, Link, LinkFault, MenuAction, PoisonSeq, SinkFault,
    UpstreamFault,
};
use crate::scenario::Target;

/// What the menu's faults act on; only the parts a scenario's faults need are present.
#[derive(Default)]
pub struct FaultKit {
    pub links: Option<Arc<Links>>,
    pub clocks: Option<Arc<Clocks>>,
    pub sink: Option<Arc<SinkFaults>>,
    pub upstream: Option<UpstreamControl>,
    /// Faults with a period that has not ended yet.
    open: Mutex<Vec<Open>>,
}

/// A fault in force: where to heal it and how to record the heal.
#[derive(Clone)]
struct Open {
    index: usize,
    name: &'static str,
    target: String,
    link: Option<Link>,
    place: Place,
}

#[derive(Clone)]
enum Place {
    Proxy(Arc<Proxy>),
    Sink,
}

impl FaultKit {
    /// A kit for a run's faults.
    pub fn new(
        links: Option<Arc<Links>>,
        clocks: Option<Arc<Clocks>>,
        sink: Option<Arc<SinkFaults>>,
        upstream: Option<UpstreamControl>,
    ) -> FaultKit {
        FaultKit {
            links,
            clocks,
            sink,
            upstream,
            open: Mutex::new(Vec::new()),
        }
    }
}

/// The parameters of a link fault, for `detail`.
fn link_detail(fault: &LinkFault) -> serde_json::Value {
    let dir = |d: &Direction| d.name();
    match fault {
        LinkFault::Latency {
            latency_ms,
            jitter_ms,
            direction,
        } => json!({"latency_ms": latency_ms, "jitter_ms": jitter_ms, "direction": dir(direction)}),
        LinkFault::Bandwidth {
            bytes_per_second,
            direction,
        } => json!({"bytes_per_second": bytes_per_second, "direction": dir(direction)}),
        LinkFault::Partition { direction } => json!({"direction": dir(direction)}),
        LinkFault::Reset | LinkFault::HalfOpen => json!({}),
    }
}

fn ddb_detail(fault: &DdbFault) -> serde_json::Value {
    let mut v = json!({"fraction": fault.fraction, "operation": fault.operation});
    match fault.kind {
        DdbFaultKind::Throttle { error } => v["error"] = json!(error.code()),
        DdbFaultKind::LateApply { hold_ms } => v["hold_ms"] = json!(hold_ms),
        DdbFaultKind::Unanswered => {}
    }
    v
}

fn sink_detail(fault: &SinkFault) -> serde_json::Value {
    match fault {
        SinkFault::Error { status, fraction } => json!({"status": status, "fraction": fraction}),
        SinkFault::Slow { latency_ms } => json!({"latency_ms": latency_ms}),
        SinkFault::Poison {
            stream,
            seq,
            status,
        } => {
            let seq = match seq {
                PoisonSeq::At(seq) => json!(seq),
                PoisonSeq::Ahead(n) => json!(format!("+{n}")),
            };
            json!({"stream_id": stream, "seq": seq, "status": status})
        }
    }
}

impl Injector {
    /// Runs one menu action (see the module doc).
    pub(super) async fn inject_menu(
        &self,
        index: usize,
        action: &MenuAction,
        draw: u64,
    ) -> anyhow::Result<()> {
        let name = action.name();
        match action {
            MenuAction::Link {
                target,
                link,
                fault,
                duration_ms,
            } => {
                let applied = Applied::Link(fault.clone());
                self.proxied(
                    index,
                    name,
                    target,
                    *link,
                    applied,
                    link_detail(fault),
                    draw,
                )
                .await?;
                self.heal_after(index, *duration_ms).await;
            }
            MenuAction::Dynamodb {
                target,
                fault,
                duration_ms,
            } => {
                let applied = Applied::Ddb(fault.clone());
                let detail = ddb_detail(fault);
                self.proxied(index, name, target, Link::Dynamodb, applied, detail, draw)
                    .await?;
                self.heal_after(index, *duration_ms).await;
            }
            MenuAction::Heal { target, link } => {
                let (workers, _) = self.resolve_all(target, draw).await?;
                let healed: Vec<Open> = {
                    let mut open = self.kit.open.lock().expect("open faults lock");
                    let (heal, keep): (Vec<Open>, Vec<Open>) = open.drain(..).partition(|o| {
                        workers.contains(&o.target)
                            && matches!(o.place, Place::Proxy(_))
                            && link.is_none_or(|l| o.link == Some(l))
                    });
                    *open = keep;
                    heal
                };
                for o in healed {
                    self.close(o, Some(index));
                }
            }
            MenuAction::Clock { target, offset_ms } => {
                // In force since each worker's start; recorded once the run's faults begin.
                let clocks = self.clocks()?;
                let (workers, items) = self.resolve_all(target, draw).await?;
                for w in workers {
                    let now = clocks.offset(&w);
                    let detail = json!({"offset_ms": offset_ms, "now_offset_ms": now, "since": "worker start"});
                    self.record_menu(index, name, &w, None, &items, detail);
                }
            }
            MenuAction::ClockStep { target, step_ms } => {
                let clocks = self.clocks()?;
                let (workers, items) = self.resolve_all(target, draw).await?;
                for w in workers {
                    let offset = clocks.step(&w, *step_ms)?;
                    let detail = json!({"step_ms": step_ms, "offset_ms": offset});
                    self.record_menu(index, name, &w, None, &items, detail);
                }
            }
            MenuAction::Upstream(fault) => self.upstream(index, name, fault).await?,
            MenuAction::Sink { fault, duration_ms } => {
                let sink = self
                    .kit
                    .sink
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("no sink to fault"))?;
                let fault = &self.resolve_poison(fault)?;
                sink.apply(index, fault.clone());
                self.record_menu(
                    index,
                    name,
                    "sink",
                    Some(Link::Sink),
                    &[],
                    sink_detail(fault),
                );
                self.kit.open.lock().expect("open faults lock").push(Open {
                    index,
                    name,
                    target: "sink".into(),
                    link: Some(Link::Sink),
                    place: Place::Sink,
                });
                self.heal_after(index, *duration_ms).await;
            }
        }
        Ok(())
    }

    /// Applies a proxy fault to each worker `target` names and records it.
    #[allow(clippy::too_many_arguments)]
    async fn proxied(
        &self,
        index: usize,
        name: &'static str,
        target: &Target,
        link: Link,
        applied: Applied,
        detail: serde_json::Value,
        draw: u64,
    ) -> anyhow::Result<()> {
        let links = self.kit.links.clone().ok_or_else(|| {
            anyhow::anyhow!("the {link} link is not proxied (no link fault was planned)")
        })?;
        let (workers, items) = self.resolve_all(target, draw).await?;
        for w in workers {
            let proxy = links
                .proxy(&w, link)
                .ok_or_else(|| anyhow::anyhow!("{w} has no {link} proxy"))?;
            proxy.apply(index, applied.clone());
            self.record_menu(index, name, &w, Some(link), &items, detail.clone());
            self.kit.open.lock().expect("open faults lock").push(Open {
                index,
                name,
                target: w,
                link: Some(link),
                place: Place::Proxy(proxy),
            });
        }
        Ok(())
    }

    /// A `sink_poison` with `seq_ahead`, made absolute: that many past the stream's last
    /// produced seq now. Other sink faults are returned as they are.
    fn resolve_poison(&self, fault: &SinkFault) -> anyhow::Result<SinkFault> {
        let SinkFault::Poison {
            stream,
            seq: seq @ PoisonSeq::Ahead(_),
            status,
        } = fault
        else {
            return Ok(fault.clone());
        };
        let up = self
            .kit
            .upstream
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no upstream to read {stream}'s head from"))?;
        let head = up
            .last_seq(stream)
            .ok_or_else(|| anyhow::anyhow!("unknown stream {stream:?}"))?;
        Ok(SinkFault::Poison {
            stream: stream.clone(),
            seq: PoisonSeq::At(seq.resolve(head)),
            status: *status,
        })
    }

    async fn upstream(
        &self,
        index: usize,
        name: &'static str,
        fault: &UpstreamFault,
    ) -> anyhow::Result<()> {
        let up = self
            .kit
            .upstream
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no upstream to fault"))?;
        let link = Some(Link::Upstream);
        match fault {
            UpstreamFault::Drop { stream } => {
                let dropped = up
                    .drop_connections(stream.as_deref())
                    .ok_or_else(|| anyhow::anyhow!("unknown stream {stream:?}"))?;
                let detail = json!({"stream_id": stream, "dropped": dropped});
                self.record_menu(index, name, "upstream", link, &[], detail);
            }
            UpstreamFault::Pause { duration_ms } => {
                up.pause();
                let detail = json!({"duration_ms": duration_ms});
                self.record_menu(index, name, "upstream", link, &[], detail);
                tokio::time::sleep(Duration::from_millis(*duration_ms)).await;
                up.resume();
                let detail = json!({"healed": name});
                self.record_menu(index, "heal", "upstream", link, &[], detail);
            }
            UpstreamFault::Gap { stream, count } => {
                let (from, to) = up
                    .lose(stream, *count)
                    .ok_or_else(|| anyhow::anyhow!("cannot lose events of {stream}"))?;
                let detail =
                    json!({"stream_id": stream, "count": count, "lost_from": from, "lost_to": to});
                self.record_menu(index, name, "upstream", link, &[], detail);
            }
            UpstreamFault::Skip { stream } => {
                let seq = up
                    .skip(stream)
                    .ok_or_else(|| anyhow::anyhow!("cannot skip a seq of {stream}"))?;
                let detail = json!({"stream_id": stream, "seq": seq});
                self.record_menu(index, name, "upstream", link, &[], detail);
            }
        }
        Ok(())
    }

    fn clocks(&self) -> anyhow::Result<Arc<Clocks>> {
        self.kit
            .clocks
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no worker runs under libfaketime"))
    }

    /// The running workers `target` names, and the lease table read just before.
    async fn resolve_all(
        &self,
        target: &Target,
        draw: u64,
    ) -> anyhow::Result<(Vec<String>, Vec<LeaseItem>)> {
        let items = self.snapshot().await?;
        let workers = match target {
            Target::All => self.fleet.in_state(State::Running),
            one => vec![self.resolve(one, &items, draw)?],
        };
        Ok((workers, items))
    }

    /// After `duration_ms` (when given), heals fault `index` wherever it is still open.
    async fn heal_after(&self, index: usize, duration_ms: Option<u64>) {
        let Some(ms) = duration_ms else { return };
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let healed: Vec<Open> = {
            let mut open = self.kit.open.lock().expect("open faults lock");
            let (heal, keep): (Vec<Open>, Vec<Open>) =
                open.drain(..).partition(|o| o.index == index);
            *open = keep;
            heal
        };
        for o in healed {
            self.close(o, None);
        }
    }

    /// Ends every fault still open (the run's end, before the settle).
    pub fn heal_everything(&self) {
        let open: Vec<Open> = self
            .kit
            .open
            .lock()
            .expect("open faults lock")
            .drain(..)
            .collect();
        for o in open {
            self.close(o, None);
        }
    }

    /// Heals one open fault and records its `heal` line (`by`: the explicit `heal` fault).
    fn close(&self, o: Open, by: Option<usize>) {
        let mut detail = json!({"healed": o.name, "by_fault": by});
        match &o.place {
            Place::Proxy(proxy) => {
                proxy.heal(o.index);
                detail["proxy"] = json!(proxy.stats());
            }
            Place::Sink => {
                if let Some(sink) = &self.kit.sink {
                    detail["answered"] = json!(sink.heal(o.index));
                }
            }
        }
        self.record_menu(o.index, "heal", &o.target, o.link, &[], detail);
    }

    fn record_menu(
        &self,
        index: usize,
        action: &str,
        target: &str,
        link: Option<Link>,
        items: &[LeaseItem],
        detail: serde_json::Value,
    ) {
        self.recorder.record(Record::Action(Action {
            t_ms: self.recorder.now_ms(),
            action: action.to_string(),
            target: target.to_string(),
            fault: Some(index),
            streams: owned_by(items, target, lease_table::now_ms()),
            link: link.map(|l| l.name().to_string()),
            detail: Some(detail),
        }));
    }
}

/// What a scenario's menu faults need before the fleet starts: proxies for the links they
/// fault (`servers` gives each link's real address), libfaketime clocks with timestamp files in
/// `dir`, the sink's and the upstream's switches. Returns the kit and the fleet's spawn hooks;
/// a scenario without link or clock faults gets no hook. Errors are the environment's (exit 2).
pub fn prepare_kit(
    scenario: &crate::scenario::Scenario,
    servers: std::collections::BTreeMap<Link, std::net::SocketAddr>,
    dir: &std::path::Path,
    sink: Arc<SinkFaults>,
    upstream: UpstreamControl,
) -> Result<(FaultKit, Vec<Arc<dyn crate::fleet::SpawnHook>>), String> {
    let menu = || {
        scenario.faults.iter().filter_map(|f| match &f.action {
            crate::scenario::FaultAction::Menu(m) => Some(m),
            _ => None,
        })
    };
    let mut hooks: Vec<Arc<dyn crate::fleet::SpawnHook>> = Vec::new();
    let faulted: std::collections::BTreeSet<Link> =
        menu().filter_map(MenuAction::proxied_link).collect();
    let links = if faulted.is_empty() {
        None
    } else {
        let links = Links::new(faulted, servers, scenario.run.seed).map_err(|e| e.to_string())?;
        let links = Arc::new(links);
        hooks.push(links.clone());
        Some(links)
    };
    let clocks = if menu().any(MenuAction::is_clock) {
        let lib = super::clock::find_libfaketime()?;
        let mut initial = std::collections::BTreeMap::new();
        for m in menu() {
            if let MenuAction::Clock { target, offset_ms } = m {
                let key = match target {
                    Target::Worker(n) => crate::scenario::worker_name(*n),
                    _ => super::clock::EVERY_WORKER.to_string(),
                };
                initial.insert(key, *offset_ms);
            }
        }
        let clocks = Arc::new(Clocks::new(lib, dir, initial));
        hooks.push(clocks.clone());
        Some(clocks)
    } else {
        None
    };
    let kit = FaultKit::new(links, clocks, Some(sink), Some(upstream));
    Ok((kit, hooks))
}

/// Refuses a scenario whose clock faults cannot run here (libfaketime missing), before anything
/// starts.
pub fn check_environment(scenario: &crate::scenario::Scenario) -> Result<(), String> {
    let clock = scenario
        .faults
        .iter()
        .any(|f| matches!(&f.action, crate::scenario::FaultAction::Menu(m) if m.is_clock()));
    if clock {
        super::clock::find_libfaketime().map_err(|e| format!("{}: {e}", scenario.name))?;
    }
    Ok(())
}
