//! Progress while a run is going: on a terminal a live indicatif line (phase, elapsed/total,
//! events produced/accepted, takeovers so far); elsewhere (CI logs) one plain line every few
//! seconds and at each phase change. At the end, the verdict and the path of `report.html`.
//!
//! Cheap to clone and safe to share between tasks; it never touches the report files.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain (non-terminal) reporter prints a line when nothing else happens.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);
/// How often [`Progress::drive`] refreshes the counters.
const TICK: Duration = Duration::from_millis(500);

/// What to show for a `phase` record of the history (`warmup_done` → the phase that follows).
pub fn phase_label(recorded: &str) -> String {
    match recorded {
        "warmup_done" => "running: faults on schedule".to_string(),
        "faults_done" => "faults done, traffic continues".to_string(),
        "production_stopped" => "settle: waiting for the sink to catch up".to_string(),
        "settled" | "settle_timeout" => "drain: stopping the fleet".to_string(),
        "drained" => "analysing the history".to_string(),
        other => other.replace('_', " "),
    }
}

/// The live line currently on the terminal, if any: [`LogWriter`] lifts it while a log line is
/// written so the two do not garble each other.
static LIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A `tracing` writer for stderr that plays well with the live progress line: each log line is
/// buffered and written with the line lifted (`ProgressBar::suspend`). Use it as
/// `tracing_subscriber::fmt().with_writer(LogWriter)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

/// One buffered log line of [`LogWriter`], written when dropped.
pub struct LogLine(Vec<u8>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::new())
    }
}

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let write = || {
            let _ = std::io::stderr().write_all(&self.0);
        };
        let bar = LIVE_BAR.lock().ok().and_then(|b| b.clone());
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }
}

/// What the run has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
    /// Events the upstream produced.
    pub produced: u64,
    /// Events the sink accepted.
    pub accepted: u64,
    /// Owner changes seen by the sink.
    pub takeovers: u64,
}

struct Plain {
    out: Box<dyn Write + Send>,
    interval: Duration,
    last: Option<Instant>,
}

struct State {
    phase: String,
    counters: Counters,
    plain: Option<Plain>,
}

/// A progress reporter for one run.
#[derive(Clone)]
pub struct Progress {
    scenario: Arc<str>,
    total_ms: u64,
    bar: Option<ProgressBar>,
    state: Arc<Mutex<State>>,
    /// Stops the live line when the last clone goes, even when the run ended in an error.
    _live: Option<Arc<Live>>,
}

/// Owns the live line's registration in [`LIVE_BAR`].
struct Live(ProgressBar);

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(mut live) = LIVE_BAR.lock() {
            *live = None;
        }
        if !self.0.is_finished() {
            self.0.abandon(); // leave the last state on screen: it shows where the run stopped
        }
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Progress {
    /// A live line on stderr when `is_terminal`, plain lines on stderr every
    /// [`PLAIN_INTERVAL`] otherwise. `total_ms` is the run's expected length.
    pub fn new(scenario: &str, total_ms: u64, is_terminal: bool) -> Progress {
        if is_terminal {
            let bar = ProgressBar::with_draw_target(
                Some(total_ms.max(1)),
                ProgressDrawTarget::stderr_with_hz(10),
            );
            let style = ProgressStyle::with_template(
                "{spinner:.green} {prefix:.bold} {bar:20.cyan/blue} {msg}",
            )
            .expect("the template is valid")
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(scenario.to_string());
            bar.enable_steady_tick(Duration::from_millis(100));
            if let Ok(mut live) = LIVE_BAR.lock() {
                *live = Some(bar.clone());
            }
            Progress::with(scenario, total_ms, Some(bar), None)
        } else {
            Progress::plain(
                scenario,
                total_ms,
                Box::new(std::io::stderr()),
                PLAIN_INTERVAL,
            )
        }
    }

    /// Decides by whether stderr is a terminal.
    pub fn stderr(scenario: &str, total_ms: u64) -> Progress {
        use std::io::IsTerminal;
        Progress::new(scenario, total_ms, std::io::stderr().is_terminal())
    }

    /// Plain lines into `out`, at most one per `interval` between phase changes.
    pub fn plain(
        scenario: &str,
        total_ms: u64,
        out: Box<dyn Write + Send>,
        interval: Duration,
    ) -> Progress {
        let plain = Plain {
            out,
            interval,
            last: None,
        };
        Progress::with(scenario, total_ms, None, Some(plain))
    }

    fn with(
        scenario: &str,
        total_ms: u64,
        bar: Option<ProgressBar>,
        plain: Option<Plain>,
    ) -> Progress {
        Progress {
            scenario: scenario.into(),
            total_ms,
            _live: bar.clone().map(|b| Arc::new(Live(b))),
            bar,
            state: Arc::new(Mutex::new(State {
                phase: "starting".to_string(),
                counters: Counters::default(),
                plain,
            })),
        }
    }

    fn line(&self, phase: &str, c: &Counters) -> String {
        format!(
            "{:.1}/{:.1} s  {phase}  produced {}  accepted {}  takeovers {}",
            c.elapsed_ms as f64 / 1000.0,
            self.total_ms as f64 / 1000.0,
            thousands(c.produced),
            thousands(c.accepted),
            c.takeovers
        )
    }

    /// Sets the phase (`provisioning`, `warm-up`, `fault 1 of 3`, `settle`…); printed at once.
    pub fn set_phase(&self, phase: impl Into<String>) {
        let mut state = self.state.lock().expect("progress lock");
        state.phase = phase.into();
        self.show(&mut state, true);
    }

    /// Updates the counters; the plain reporter prints when its interval has passed.
    pub fn update(&self, counters: Counters) {
        let mut state = self.state.lock().expect("progress lock");
        state.counters = counters;
        self.show(&mut state, false);
    }

    fn show(&self, state: &mut State, force: bool) {
        let text = self.line(&state.phase, &state.counters);
        if let Some(bar) = &self.bar {
            bar.set_position(state.counters.elapsed_ms.min(self.total_ms));
            bar.set_message(text);
            return;
        }
        if let Some(plain) = &mut state.plain {
            let due = plain.last.is_none_or(|t| t.elapsed() >= plain.interval);
            if force || due {
                plain.last = Some(Instant::now());
                let _ = writeln!(plain.out, "[{}] {text}", self.scenario);
                let _ = plain.out.flush();
            }
        }
    }

    /// Runs `work` while refreshing the counters from `counters` twice a second; returns what
    /// `work` returns. `counters` may borrow what `work` borrows (nothing is spawned).
    pub async fn drive<T>(
        &self,
        work: impl std::future::Future<Output = T>,
        counters: impl Fn() -> Counters,
    ) -> T {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => {
                    self.update(counters());
                    return out;
                }
                _ = tick.tick() => self.update(counters()),
            }
        }
    }

    /// Ends the live line and prints the verdict and where the report is.
    pub fn finish(&self, passed: bool, html: &Path) {
        let verdict = if passed { "PASSED" } else { "FAILED" };
        let text = format!("{verdict} — report: {}", html.display());
        if let Some(bar) = &self.bar {
            if let Ok(mut live) = LIVE_BAR.lock() {
                *live = None;
            }
            bar.finish_and_clear();
            eprintln!("{}: {text}", self.scenario);
            return;
        }
        let mut state = self.state.lock().expect("progress lock");
        if let Some(plain) = &mut state.plain {
            let _ = writeln!(plain.out, "[{}] {text}", self.scenario);
            let _ = plain.out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_mode_prints_phases_at_once_and_updates_at_most_once_per_interval() {
        let out = Shared::default();
        let p = Progress::plain(
            "task-kill",
            35_000,
            Box::new(out.clone()),
            Duration::from_secs(3600),
        );
        p.set_phase("warm-up");
        for i in 0..100 {
            p.update(Counters {
                elapsed_ms: i * 10,
                produced: 1234 + i,
                accepted: 1200,
                takeovers: 0,
            });
        }
        p.set_phase("fault 1 of 2");
        p.finish(false, Path::new("reports/x/report.html"));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("warm-up"), "{text}");
        assert!(
            lines[1].contains("fault 1 of 2") && lines[1].contains("1,333"),
            "{text}"
        );
        assert!(lines[1].starts_with("[task-kill] 1.0/35.0 s"), "{text}");
        assert_eq!(
            lines[2],
            "[task-kill] FAILED — report: reports/x/report.html"
        );
    }

    #[test]
    fn plain_mode_prints_updates_once_the_interval_passed() {
        let out = Shared::default();
        let p = Progress::plain("s", 1000, Box::new(out.clone()), Duration::ZERO);
        p.update(Counters::default());
        p.update(Counters::default());
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
