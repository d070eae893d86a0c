//! Appends records to `history.jsonl` from a dedicated thread with a large buffered writer, fed
//! by an unbounded channel. Senders never block and never hold a lock across an await; the sink
//! sends while holding a stream's shard lock, so a stream's receipts reach the file in the order
//! the sink decided them.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::records::{ReceiptBatch, Record};

enum Message {
    /// Boxed: `run_start` (with the scenario text) makes a record large; receipts, the bulk,
    /// travel in `Receipts`.
    One(Box<Record>),
    Receipts(ReceiptBatch),
    /// Flush, close the file and stop, even while other handles are still alive.
    End,
}

/// A cheap, cloneable handle for recording; it also owns the run's clock (t0).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::UnboundedSender<Message>,
    t0: Instant,
    receipts: Arc<AtomicU64>,
}

impl Recorder {
    /// Milliseconds since t0.
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// The run's t0.
    pub fn t0(&self) -> Instant {
        self.t0
    }

    /// Queues one record. After the writer finished, records are dropped.
    pub fn record(&self, record: Record) {
        let _ = self.tx.send(Message::One(Box::new(record)));
    }

    /// Queues the receipts of one sink batch as one message.
    pub fn receipts(&self, batch: ReceiptBatch) {
        self.receipts
            .fetch_add(batch.events.len() as u64, Ordering::Relaxed);
        let _ = self.tx.send(Message::Receipts(batch));
    }

    /// Receipts queued so far.
    pub fn receipt_count(&self) -> u64 {
        self.receipts.load(Ordering::Relaxed)
    }
}

/// Owns the writer thread; [`HistoryWriter::finish`] flushes and closes the file.
pub struct HistoryWriter {
    tx: Option<mpsc::UnboundedSender<Message>>,
    thread: Option<JoinHandle<std::io::Result<u64>>>,
    recorder: Recorder,
}

impl HistoryWriter {
    /// Creates (truncates) the file and starts the writer thread; t0 is now.
    pub fn create(path: &Path) -> anyhow::Result<HistoryWriter> {
        let file = File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || write_loop(rx, BufWriter::with_capacity(1 << 20, file)))?;
        let recorder = Recorder {
            tx: tx.clone(),
            t0: Instant::now(),
            receipts: Arc::new(AtomicU64::new(0)),
        };
        Ok(HistoryWriter {
            tx: Some(tx),
            thread: Some(thread),
            recorder,
        })
    }

    /// A handle for recording.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Writes what is queued, closes the file and returns how many lines were written. Records
    /// sent afterwards through surviving handles are dropped.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        self.close()
    }

    fn close(&mut self) -> anyhow::Result<u64> {
        let Some(thread) = self.thread.take() else {
            return Ok(0);
        };
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Message::End);
        }
        let lines = thread
            .join()
            .map_err(|_| anyhow::anyhow!("the history writer thread panicked"))?
            .map_err(|e| anyhow::anyhow!("writing history failed: {e}"))?;
        Ok(lines)
    }
}

impl Drop for HistoryWriter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.close();
        }
    }
}

fn write_loop(
    mut rx: mpsc::UnboundedReceiver<Message>,
    mut out: BufWriter<File>,
) -> std::io::Result<u64> {
    let mut lines = 0u64;
    let mut batch = Vec::with_capacity(1024);
    let mut line = Vec::with_capacity(256);
    'outer: loop {
        if rx.blocking_recv_many_compat(&mut batch, 1024) == 0 {
            break;
        }
        for message in batch.drain(..) {
            match message {
                Message::End => break 'outer,
                Message::One(record) => {
                    write_line(&mut out, &record)?;
                    lines += 1;
                }
                Message::Receipts(batch) => {
                    write_receipts(&mut out, &batch, &mut line)?;
                    lines += batch.events.len() as u64;
                }
            }
        }
        if rx.is_empty() {
            out.flush()?;
        }
    }
    out.flush()?;
    out.get_ref().sync_data()?;
    Ok(lines)
}

fn write_line(out: &mut BufWriter<File>, record: &Record) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")
}

/// One `receipt` line per event of `batch`, byte for byte what serde writes for
/// `Record::Receipt`, with the shared fields escaped once (the history's hot path: one line per
/// event the sink receives). `line` is scratch space.
fn write_receipts(
    out: &mut impl Write,
    batch: &ReceiptBatch,
    line: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut numbers = itoa::Buffer::new();
    // `{"kind":"receipt","t_ms":T,"stream_id":S,"seq":` … `,"fence_token":F,"owner_id":O,"outcome":"`
    let mut head = Vec::with_capacity(64 + batch.stream_id.len());
    head.extend_from_slice(br#"{"kind":"receipt","t_ms":"#);
    head.extend_from_slice(numbers.format(batch.t_ms).as_bytes());
    head.extend_from_slice(br#","stream_id":"#);
    serde_json::to_writer(&mut head, &batch.stream_id)?;
    head.extend_from_slice(br#","seq":"#);
    let mut middle = Vec::with_capacity(64 + batch.owner_id.len());
    middle.extend_from_slice(br#","fence_token":"#);
    middle.extend_from_slice(numbers.format(batch.fence_token).as_bytes());
    middle.extend_from_slice(br#","owner_id":"#);
    serde_json::to_writer(&mut middle, &batch.owner_id)?;
    middle.extend_from_slice(br#","outcome":""#);
    for &(seq, outcome) in &batch.events {
        line.clear();
        line.extend_from_slice(&head);
        line.extend_from_slice(numbers.format(seq).as_bytes());
        line.extend_from_slice(&middle);
        line.extend_from_slice(outcome.as_str().as_bytes());
        line.extend_from_slice(b"\"}\n");
        out.write_all(line)?;
    }
    Ok(())
}

trait RecvMany<T> {
    fn blocking_recv_many_compat(&mut self, buf: &mut Vec<T>, limit: usize) -> usize;
}

impl<T> RecvMany<T> for mpsc::UnboundedReceiver<T> {
    /// Blocks for the first message, then takes whatever else is already queued.
    fn blocking_recv_many_compat(&mut self, buf: &mut Vec<T>, limit: usize) -> usize {
        match self.blocking_recv() {
            None => 0,
            Some(first) => {
                buf.push(first);
                while buf.len() < limit {
                    match self.try_recv() {
                        Ok(m) => buf.push(m),
                        Err(_) => break,
                    }
                }
                buf.len()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Outcome, Receipt};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_senders_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let writer = HistoryWriter::create(&path).unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let recorder = writer.recorder();
                tokio::spawn(async move {
                    for batch in 0..500u64 {
                        recorder.receipts(ReceiptBatch {
                            t_ms: recorder.now_ms(),
                            stream_id: format!("s-{task}"),
                            fence_token: 1,
                            owner_id: "w".into(),
                            events: (0..20)
                                .map(|i| (batch * 20 + i + 1, Outcome::Accepted))
                                .collect(),
                        });
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(writer.recorder().receipt_count(), 80_000);
        assert_eq!(writer.finish().unwrap(), 80_000);
        let mut last: std::collections::HashMap<String, u64> = Default::default();
        for record in crate::history::read(&path).unwrap() {
            let Record::Receipt(r) = record.unwrap() else {
                panic!("only receipts were sent")
            };
            let previous = last.insert(r.stream_id.clone(), r.seq).unwrap_or(0);
            assert_eq!(r.seq, previous + 1, "each sender's receipts stay in order");
        }
        assert_eq!(last.len(), 8);
    }

    #[test]
    fn receipt_lines_are_what_serde_writes() {
        let odd = "quote \" backslash \\ tab \t newline \n bell \u{7} é ☃";
        let outcomes = [Outcome::Accepted, Outcome::Duplicate, Outcome::Fenced];
        for (stream_id, owner_id) in [("s-0001", "worker-1"), (odd, odd), ("", "")] {
            let batch = ReceiptBatch {
                t_ms: 1_234_567,
                stream_id: stream_id.into(),
                fence_token: u64::MAX,
                owner_id: owner_id.into(),
                events: vec![(0, outcomes[0]), (7, outcomes[1]), (u64::MAX, outcomes[2])],
            };
            let mut ours = Vec::new();
            write_receipts(&mut ours, &batch, &mut Vec::new()).unwrap();
            let mut serde = Vec::new();
            for &(seq, outcome) in &batch.events {
                let record = Record::Receipt(Receipt {
                    t_ms: batch.t_ms,
                    stream_id: batch.stream_id.clone(),
                    seq,
                    fence_token: batch.fence_token,
                    owner_id: batch.owner_id.clone(),
                    outcome,
                });
                serde_json::to_writer(&mut serde, &record).unwrap();
                serde.push(b'\n');
            }
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
    }
}
