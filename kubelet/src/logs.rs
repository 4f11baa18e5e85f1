//! Container log files: the CRI line format, size-based rotation, and reading with the options
//! of `kubectl logs` (`tailLines`, `sinceSeconds`, `timestamps`, `limitBytes`).
//!
//! Each line the container writes is stored as `<RFC 3339 time> <stream> <F|P> <text>`, the format
//! of the Kubernetes CRI log files: `P` marks a piece of a line longer than [`MAX_LINE`] that goes
//! on in the next record. A file that grows past its limit is renamed `<path>.1` (older ones shift
//! to `.2`, ...; the oldest beyond the kept count is deleted) and a fresh file is opened.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;

/// Longest text of one record; longer lines are split into `P` records.
pub const MAX_LINE: usize = 16 * 1024;

/// Which output of the container a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// A container log file being written, rotated by size.
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    max_files: usize,
}

impl Writer {
    /// Opens (appending to) `path`; rotates once it exceeds `max_size` bytes, keeping
    /// `max_files` files in all (the live one included, at least 1).
    pub fn open(path: &Path, max_size: u64, max_files: usize) -> io::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            file,
            size,
            max_size: max_size.max(1),
            max_files: max_files.max(1),
        })
    }

    /// Appends one line of output (without its newline) as one or more records.
    pub fn write_line(&mut self, stream: Stream, now: Timestamp, text: &[u8]) -> io::Result<()> {
        let mut chunks = text.chunks(MAX_LINE).peekable();
        if chunks.peek().is_none() {
            return self.write_record(stream, now, 'F', b"");
        }
        while let Some(chunk) = chunks.next() {
            let tag = if chunks.peek().is_some() { 'P' } else { 'F' };
            self.write_record(stream, now, tag, chunk)?;
        }
        Ok(())
    }

    fn write_record(
        &mut self,
        stream: Stream,
        now: Timestamp,
        tag: char,
        text: &[u8],
    ) -> io::Result<()> {
        let mut record = format!("{} {} {} ", format_time(now), stream.as_str(), tag).into_bytes();
        record.extend_from_slice(text);
        record.push(b'\n');
        self.file.write_all(&record)?;
        self.size += record.len() as u64;
        if self.size >= self.max_size {
            self.rotate()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let kept = self.max_files - 1;
        if kept == 0 {
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(rotated(&self.path, kept));
        for n in (1..kept).rev() {
            let from = rotated(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// RFC 3339 with nanoseconds, as CRI log files have it.
pub fn format_time(t: Timestamp) -> String {
    format!("{t:.9}")
}

/// One record of a log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// When the kubelet read the line.
    pub time: Timestamp,
    /// Which output it came from.
    pub stream: Stream,
    /// Whether this record ends the line (`F`) or a longer line goes on (`P`).
    pub full: bool,
    /// The text, without newline.
    pub text: String,
}

/// Parses one record; `None` for a malformed line.
pub fn parse_record(line: &str) -> Option<Record> {
    let mut parts = line.splitn(4, ' ');
    let time: Timestamp = parts.next()?.parse().ok()?;
    let stream = match parts.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let full = match parts.next()? {
        "F" => true,
        "P" => false,
        _ => return None,
    };
    Some(Record {
        time,
        stream,
        full,
        text: parts.next().unwrap_or("").to_string(),
    })
}

/// What `kubectl logs` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only lines written at or after this time (from `sinceSeconds` / `sinceTime`).
    pub since: Option<Timestamp>,
    /// Prefix each line with its RFC 3339 time.
    pub timestamps: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
}

/// The log files of `path`, oldest first: `path.N`, ..., `path.1`, `path`.
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut rotated_files: Vec<(usize, PathBuf)> = Vec::new();
    for n in 1.. {
        let p = rotated(path, n);
        if !p.exists() {
            break;
        }
        rotated_files.push((n, p));
    }
    let mut out: Vec<PathBuf> = rotated_files.into_iter().rev().map(|(_, p)| p).collect();
    if path.exists() {
        out.push(path.to_path_buf());
    }
    out
}

/// Reads the lines of a log (rotated files included) as `kubectl logs` shows them.
pub fn read(path: &Path, opts: &ReadOptions) -> io::Result<Vec<u8>> {
    let mut lines: Vec<String> = Vec::new();
    let mut pending: Option<(Timestamp, String)> = None;
    for file in files(path) {
        let reader = BufReader::new(File::open(file)?);
        for line in reader.lines() {
            let Some(rec) = parse_record(&line?) else {
                continue;
            };
            let (time, mut text) = pending.take().unwrap_or((rec.time, String::new()));
            text.push_str(&rec.text);
            if !rec.full {
                pending = Some((time, text));
                continue;
            }
            if opts.since.is_some_and(|since| time < since) {
                continue;
            }
            lines.push(render(time, &text, opts.timestamps));
        }
    }
    if let Some(n) = opts.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut out: Vec<u8> = lines.concat().into_bytes();
    if let Some(limit) = opts.limit_bytes {
        out.truncate(limit);
    }
    Ok(out)
}

/// One line as shown to the user.
pub fn render(time: Timestamp, text: &str, timestamps: bool) -> String {
    if timestamps {
        format!("{} {text}\n", format_time(time))
    } else {
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn records_round_trip_in_cri_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c/0.log");
        let mut w = Writer::open(&path, 1 << 20, 3).unwrap();
        w.write_line(Stream::Stdout, ts(10), b"hello world")
            .unwrap();
        w.write_line(Stream::Stderr, ts(11), b"oops").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(first, "1970-01-01T00:00:10.000000000Z stdout F hello world");
        let rec = parse_record(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(rec.stream, Stream::Stderr);
        assert_eq!(rec.text, "oops");
        assert_eq!(rec.time, ts(11));
        let out = read(&path, &ReadOptions::default()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "hello world\noops\n");
    }

    #[test]
    fn long_lines_split_into_partial_records_and_rejoin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut w = Writer::open(&path, 1 << 30, 1).unwrap();
        let long = vec![b'x'; MAX_LINE * 2 + 5];
        w.write_line(Stream::Stdout, ts(1), &long).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let tags: Vec<bool> = text
            .lines()
            .map(|l| parse_record(l).unwrap().full)
            .collect();
        assert_eq!(tags, vec![false, false, true]);
        let out = read(&path, &ReadOptions::default()).unwrap();
        assert_eq!(out.len(), long.len() + 1);
    }

    #[test]
    fn rotation_keeps_max_files_and_reads_across_them_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        // Each record is about 47 bytes: a 100-byte limit rotates every 3 records.
        let mut w = Writer::open(&path, 100, 3).unwrap();
        for i in 0..20 {
            w.write_line(Stream::Stdout, ts(i), format!("line {i:02}").as_bytes())
                .unwrap();
        }
        assert!(rotated(&path, 1).exists());
        assert!(rotated(&path, 2).exists());
        assert!(!rotated(&path, 3).exists(), "only 3 files kept");
        let out = String::from_utf8(read(&path, &ReadOptions::default()).unwrap()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(*lines.last().unwrap(), "line 19");
        let mut sorted = lines.clone();
        sorted.sort();
        assert_eq!(lines, sorted, "oldest file first");
        assert!(lines.len() < 20, "the oldest lines were rotated away");
    }

    #[test]
    fn tail_since_timestamps_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut w = Writer::open(&path, 1 << 20, 2).unwrap();
        for i in 0..10 {
            w.write_line(Stream::Stdout, ts(i), format!("l{i}").as_bytes())
                .unwrap();
        }
        let tail = read(
            &path,
            &ReadOptions {
                tail_lines: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(tail, b"l8\nl9\n");
        let since = read(
            &path,
            &ReadOptions {
                since: Some(ts(7)),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(since, b"l7\nl8\nl9\n");
        let stamped = read(
            &path,
            &ReadOptions {
                tail_lines: Some(1),
                timestamps: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(stamped, b"1970-01-01T00:00:09.000000000Z l9\n");
        let limited = read(
            &path,
            &ReadOptions {
                limit_bytes: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(limited, b"l0\nl");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        assert!(parse_record("garbage").is_none());
        assert!(parse_record("2024-01-01T00:00:00Z stdin F x").is_none());
        assert_eq!(
            parse_record("2024-01-01T00:00:00Z stdout F").unwrap().text,
            ""
        );
    }
}
