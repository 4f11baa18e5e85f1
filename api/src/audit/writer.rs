//! Where events go: JSON lines to stdout or to a file rotated by size, as kube-apiserver's log
//! backend (lumberjack) rotates: when a write would pass `max_bytes` the file is renamed to
//! `NAME-<UTC time to the millisecond>.EXT` and a new one started; the newest `max_backups`
//! backups are kept (0 = all) and backups older than `max_age` deleted.
//!
//! Writing happens on a thread of its own fed by a bounded channel ([`Writer`]), so a request
//! never waits on the disk; only when the disk falls a whole queue behind do requests wait for
//! room (see [`super::Auditor`]).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::event::Event;

/// lumberjack's size when none is given (kube-apiserver's `--audit-log-maxsize=0`).
pub const DEFAULT_MAX_BYTES: u64 = 100 << 20;

/// When and how the log file is rotated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before the file would pass this size; 0 = [`DEFAULT_MAX_BYTES`].
    pub max_bytes: u64,
    /// Backups kept; 0 = all.
    pub max_backups: usize,
    /// Backups older than this are deleted; `None` = kept whatever their age.
    pub max_age: Option<Duration>,
}

/// An open audit log.
pub enum Sink {
    /// Standard output (`--audit-log-path=-`), never rotated.
    Stdout(std::io::Stdout),
    /// A file.
    File(RotatingFile),
}

impl Sink {
    /// Opens `-` as stdout, anything else as a file (its directory created).
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<Sink> {
        if path == Path::new("-") {
            Ok(Sink::Stdout(std::io::stdout()))
        } else {
            RotatingFile::open(path, rotation).map(Sink::File)
        }
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Stdout(out) => out.lock().write_all(line),
            Sink::File(file) => file.write_line(line, jiff::Timestamp::now()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout(out) => out.flush(),
            Sink::File(file) => file.file.flush(),
        }
    }
}

/// A log file that rotates by size.
pub struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    rotation: Rotation,
}

impl RotatingFile {
    /// Opens (appends to) `path`, creating it and its directory.
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file: BufWriter::new(file),
            size,
            rotation,
        })
    }

    /// Appends one line, rotating first if it would pass the size limit.
    pub fn write_line(&mut self, line: &[u8], now: jiff::Timestamp) -> std::io::Result<()> {
        let max = match self.rotation.max_bytes {
            0 => DEFAULT_MAX_BYTES,
            n => n,
        };
        if self.size > 0 && self.size + line.len() as u64 > max {
            self.rotate(now)?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self, now: jiff::Timestamp) -> std::io::Result<()> {
        self.file.flush()?;
        let mut at = now;
        let mut backup = backup_path(&self.path, at);
        // Two rotations within a millisecond: the later one takes the next free name.
        while backup.exists() {
            at += jiff::SignedDuration::from_millis(1);
            backup = backup_path(&self.path, at);
        }
        std::fs::rename(&self.path, &backup)?;
        self.file = BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        self.prune(now)
    }

    /// Deletes the backups beyond `max_backups` (oldest first) and those older than `max_age`.
    fn prune(&self, now: jiff::Timestamp) -> std::io::Result<()> {
        let mut backups = self.backups()?;
        backups.sort_by_key(|b| std::cmp::Reverse(b.0));
        for (i, (at, path)) in backups.iter().enumerate() {
            let too_many = self.rotation.max_backups > 0 && i >= self.rotation.max_backups;
            let too_old = self.rotation.max_age.is_some_and(|age| {
                now.duration_since(*at) > jiff::SignedDuration::try_from(age).unwrap_or_default()
            });
            if too_many || too_old {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }

    /// The backups of this file and their times, from their names.
    pub fn backups(&self) -> std::io::Result<Vec<(jiff::Timestamp, PathBuf)>> {
        let (stem, ext) = stem_and_ext(&self.path);
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => dir.to_path_buf(),
            None => PathBuf::from("."),
        };
        let prefix = format!("{stem}-");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(time) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(ext.as_str()))
            else {
                continue;
            };
            if let Ok(at) = jiff::civil::DateTime::strptime(BACKUP_TIME, time)
                .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC))
            {
                found.push((at.timestamp(), entry.path()));
            }
        }
        Ok(found)
    }
}

/// lumberjack's backup time layout (`2006-01-02T15-04-05.000`), in UTC.
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";

fn stem_and_ext(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
        _ => (name, String::new()),
    }
}

/// `dir/audit.log` rotated at `at` becomes `dir/audit-2026-12-05T04-10-00.123.log`.
pub fn backup_path(path: &Path, at: jiff::Timestamp) -> PathBuf {
    let (stem, ext) = stem_and_ext(path);
    let time = at.to_zoned(jiff::tz::TimeZone::UTC).strftime(BACKUP_TIME);
    path.with_file_name(format!("{stem}-{time}{ext}"))
}

fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// What the writer thread is sent.
pub(crate) enum Message {
    /// An event to write.
    Event(Box<Event>),
    /// Write everything sent before, flush, and answer.
    Flush(oneshot::Sender<()>),
}

/// The sending side of the writer thread.
#[derive(Clone)]
pub struct Writer {
    pub(crate) tx: mpsc::Sender<Message>,
}

impl Writer {
    /// Starts the thread writing to `sink`, behind a queue of `capacity` events.
    pub fn start(sink: Sink, capacity: usize) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Message>(capacity.max(1));
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                let mut sink = sink;
                let mut line = Vec::with_capacity(4096);
                while let Some(first) = rx.blocking_recv() {
                    // Write what has queued up, then flush once: a batch per wake-up.
                    let mut next = Some(first);
                    while let Some(message) = next {
                        match message {
                            Message::Event(event) => {
                                line.clear();
                                if serde_json::to_writer(&mut line, &event).is_ok() {
                                    line.push(b'\n');
                                    if let Err(error) = sink.write_line(&line) {
                                        tracing::error!(%error, "cannot write the audit log");
                                    }
                                }
                            }
                            Message::Flush(done) => {
                                if let Err(error) = sink.flush() {
                                    tracing::error!(%error, "cannot flush the audit log");
                                }
                                let _ = done.send(());
                            }
                        }
                        next = rx.try_recv().ok();
                    }
                    if let Err(error) = sink.flush() {
                        tracing::error!(%error, "cannot flush the audit log");
                    }
                }
            })
            .expect("spawning the audit log thread");
        Writer { tx }
    }

    /// Waits until every event sent before is written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn backups_are_named_as_lumberjack_names_them() {
        assert_eq!(
            backup_path(
                Path::new("/var/log/audit.log"),
                at("2026-12-05T04:10:00.123Z")
            ),
            Path::new("/var/log/audit-2026-12-05T04-10-00.123.log")
        );
        assert_eq!(
            backup_path(Path::new("audit"), at("2026-12-05T04:10:00Z")),
            Path::new("audit-2026-12-05T04-10-00.000")
        );
    }

    #[test]
    fn files_rotate_by_size_and_keep_the_newest_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let rotation = Rotation {
            max_bytes: 100,
            max_backups: 2,
            max_age: None,
        };
        let mut file = RotatingFile::open(&path, rotation).unwrap();
        let line = [b'x'; 39].iter().chain(b"\n").copied().collect::<Vec<u8>>();
        // Two 40-byte lines fit in 100 bytes, the third starts a new file.
        let mut now = at("2026-12-05T04:00:00Z");
        for _ in 0..8 {
            file.write_line(&line, now).unwrap();
            now += jiff::SignedDuration::from_secs(1);
        }
        file.file.flush().unwrap();
        // 8 lines: 3 full files rotated away (2 kept) and 2 lines in the current one.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 80);
        let mut backups = file.backups().unwrap();
        backups.sort();
        let names: Vec<String> = backups
            .iter()
            .map(|(_, p)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "audit-2026-12-05T04-00-04.000.log",
                "audit-2026-12-05T04-00-06.000.log"
            ]
        );
        for (_, backup) in &backups {
            assert_eq!(std::fs::metadata(backup).unwrap().len(), 80);
        }
        // Reopening appends and counts what is there.
        drop(file);
        let mut file = RotatingFile::open(
            &path,
            Rotation {
                max_bytes: 100,
                ..Default::default()
            },
        )
        .unwrap();
        file.write_line(&line, now).unwrap();
        file.file.flush().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 40);
        assert_eq!(file.backups().unwrap().len(), 3);
    }

    #[test]
    fn old_backups_are_deleted_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let day = Duration::from_secs(86_400);
        let rotation = Rotation {
            max_bytes: 10,
            max_backups: 0,
            max_age: Some(day),
        };
        let mut file = RotatingFile::open(&path, rotation).unwrap();
        file.write_line(b"0123456789", at("2026-12-01T00:00:00Z"))
            .unwrap();
        file.write_line(b"0123456789", at("2026-12-01T00:00:00Z"))
            .unwrap();
        file.write_line(b"0123456789", at("2026-12-04T00:00:00Z"))
            .unwrap();
        // The backup made on the 1st is 3 days old by the rotation of the 4th: gone.
        let backups = file.backups().unwrap();
        assert_eq!(backups.len(), 1, "{backups:?}");
        assert_eq!(backups[0].0, at("2026-12-04T00:00:00Z"));
        // A file not named like a backup is never touched.
        std::fs::write(dir.path().join("audit-notes.log"), "keep").unwrap();
        file.write_line(b"0123456789", at("2026-12-09T00:00:00Z"))
            .unwrap();
        assert!(dir.path().join("audit-notes.log").exists());
    }

    #[test]
    fn an_unwritable_path_fails_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        // A directory where a file is in the way.
        let error = Sink::open(&blocker.join("audit.log"), Rotation::default())
            .err()
            .unwrap();
        assert!(
            matches!(
                error.kind(),
                std::io::ErrorKind::NotADirectory | std::io::ErrorKind::AlreadyExists
            ),
            "{error:?}"
        );
        // The path is itself a directory.
        assert!(Sink::open(dir.path(), Rotation::default()).is_err());
    }

    #[tokio::test]
    async fn flush_writes_everything_sent_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let writer = Writer::start(Sink::open(&path, Rotation::default()).unwrap(), 4);
        for i in 0..20 {
            let mut event = super::super::tests::sample_event();
            event.audit_id = format!("id-{i}");
            writer
                .tx
                .send(Message::Event(Box::new(event)))
                .await
                .unwrap();
        }
        writer.flush().await;
        let text = std::fs::read_to_string(&path).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["auditID"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(ids, (0..20).map(|i| format!("id-{i}")).collect::<Vec<_>>());
    }
}
