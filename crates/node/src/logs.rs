//! Container logs as the kubelet serves them: the runtime's CRI log files
//! (`<RFC3339Nano> <stdout|stderr> <P|F> <content>` per line, `P` for a
//! line split by the runtime) read with kube's PodLogOptions — `follow`,
//! `previous`, `tailLines`, `sinceSeconds`/`sinceTime`, `timestamps`,
//! `limitBytes` — and rotated by size as `containerLogMaxSize` and
//! `containerLogMaxFiles` say.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// kube's PodLogOptions, as query parameters give them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    /// Keep streaming while the container runs.
    pub follow: bool,
    /// The previous run's log.
    pub previous: bool,
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only lines newer than this (Unix nanoseconds).
    pub since_ns: Option<i128>,
    /// Prefix each line with its RFC 3339 timestamp.
    pub timestamps: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
}

/// A bad log query (kube answers 400 with these words).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadLogOptions(pub String);

impl LogOptions {
    /// Parse the query parameters of `/containerLogs` (and of `pods/log`).
    pub fn from_query(pairs: &[(String, String)]) -> Result<LogOptions, BadLogOptions> {
        let mut o = LogOptions::default();
        let flag = |v: &str| matches!(v, "true" | "1" | "");
        for (k, v) in pairs {
            match k.as_str() {
                "follow" => o.follow = flag(v),
                "previous" => o.previous = flag(v),
                "timestamps" => o.timestamps = flag(v),
                "tailLines" | "tail" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| BadLogOptions(format!("tailLines: invalid value {v:?}")))?;
                    if n < 0 {
                        return Err(BadLogOptions(
                            "tailLines: Invalid value: must be greater than or equal to 0".into(),
                        ));
                    }
                    o.tail_lines = Some(n as usize);
                }
                "limitBytes" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| BadLogOptions(format!("limitBytes: invalid value {v:?}")))?;
                    if n < 1 {
                        return Err(BadLogOptions(
                            "limitBytes: Invalid value: must be greater than 0".into(),
                        ));
                    }
                    o.limit_bytes = Some(n as usize);
                }
                "sinceSeconds" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| BadLogOptions(format!("sinceSeconds: invalid value {v:?}")))?;
                    if n < 1 {
                        return Err(BadLogOptions(
                            "sinceSeconds: Invalid value: must be greater than 0".into(),
                        ));
                    }
                    let now = jiff::Timestamp::now().as_nanosecond();
                    o.since_ns = Some(now - i128::from(n) * 1_000_000_000);
                }
                "sinceTime" => {
                    let t: jiff::Timestamp = v
                        .parse()
                        .map_err(|_| BadLogOptions(format!("sinceTime: invalid value {v:?}")))?;
                    o.since_ns = Some(t.as_nanosecond());
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// One parsed CRI log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub time: &'a str,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// Whether the line is complete (`F`) or a part (`P`).
    pub full: bool,
    /// The content, without the newline.
    pub content: &'a [u8],
}

/// Parse one line of a CRI log file (without its newline).
pub fn parse_line(line: &[u8]) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or_default();
    let full = match tag {
        b"F" => true,
        b"P" => false,
        // Tags may carry more, colon-separated; the first is P or F.
        t => !t.starts_with(b"P"),
    };
    Some(LogLine {
        time,
        stream,
        full,
        content,
    })
}

fn line_ns(time: &str) -> Option<i128> {
    time.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_nanosecond())
}

/// Render the lines of `data` (whole lines only) by `opts`, without the
/// tail and byte limits: what `follow` appends.
fn render(data: &[u8], opts: &LogOptions, out: &mut Vec<u8>) {
    for raw in data.split(|&b| b == b'\n') {
        if raw.is_empty() {
            continue;
        }
        let Some(l) = parse_line(raw) else { continue };
        if let Some(since) = opts.since_ns
            && line_ns(l.time).is_some_and(|t| t < since)
        {
            continue;
        }
        if opts.timestamps {
            out.extend_from_slice(l.time.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(l.content);
        if l.full {
            out.push(b'\n');
        }
    }
}

/// The log of `data` by `opts` (tail and since applied; no byte limit).
pub fn render_all(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let start = match opts.tail_lines {
        None => 0,
        Some(n) => tail_offset(data, n),
    };
    let mut out = Vec::new();
    render(&data[start..], opts, &mut out);
    out
}

/// Where the last `n` complete log lines (`F` lines, with the `P` parts
/// before them) begin.
fn tail_offset(data: &[u8], n: usize) -> usize {
    if n == 0 {
        return data.len();
    }
    let mut seen = 0;
    let mut end = data.len();
    // Walk back over lines; count one per full line.
    while end > 0 {
        let line_end = if data[end - 1] == b'\n' { end - 1 } else { end };
        let start = data[..line_end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        if parse_line(&data[start..line_end]).is_some_and(|l| l.full) {
            if seen == n {
                return end;
            }
            seen += 1;
        }
        end = start;
    }
    0
}

/// The files of one container log, oldest first: rotated ones
/// (`<log>.<timestamp>`, not compressed) then the live one.
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let prefix = format!("{}.", name.to_string_lossy());
        let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(&prefix) && !n.ends_with(".gz") && !n.ends_with(".tmp")
                })
            })
            .collect();
        rotated.sort();
        out.extend(rotated);
    }
    out.push(path.to_path_buf());
    out
}

/// How much of a log file is read at once: memory per `kubectl logs` is
/// this, a tail's lines and one unfinished line, whatever the log's size.
const CHUNK: usize = 64 * 1024;

/// A container's log files read forward in chunks, handed out as blocks
/// of whole lines; an unfinished line waits for the rest (across files, as
/// the runtime's rotation may cut one).
struct Lines {
    files: std::collections::VecDeque<PathBuf>,
    file: Option<tokio::fs::File>,
    /// Whether `file` is the live (last) file.
    live: bool,
    /// Bytes read from the live file.
    live_read: u64,
    carry: Vec<u8>,
    /// The read buffer, one chunk long.
    buf: Vec<u8>,
}

impl Lines {
    fn new(files: Vec<PathBuf>, chunk: usize) -> Lines {
        Lines {
            files: files.into(),
            file: None,
            live: false,
            live_read: 0,
            carry: Vec::new(),
            buf: vec![0; chunk],
        }
    }

    /// The next block of whole lines (each with its newline), or `None`
    /// when every file is read.
    async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            let Some(file) = self.file.as_mut() else {
                let path = self.files.pop_front()?;
                self.live = self.files.is_empty();
                self.file = tokio::fs::File::open(&path).await.ok();
                continue;
            };
            let n = match file.read(&mut self.buf).await {
                Ok(0) | Err(_) => {
                    self.file = None;
                    continue;
                }
                Ok(n) => n,
            };
            if self.live {
                self.live_read += n as u64;
            }
            let had = self.carry.len();
            self.carry.extend_from_slice(&self.buf[..n]);
            let Some(i) = self.buf[..n].iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let rest = self.carry.split_off(had + i + 1);
            return Some(std::mem::replace(&mut self.carry, rest));
        }
    }

    /// Where following the live file goes on: after its last whole line.
    fn follow_offset(&self) -> u64 {
        self.live_read.saturating_sub(self.carry.len() as u64)
    }
}

/// Stream a container's log by `opts` into `tx`; when following, keep
/// reading while `running` says the container runs, then drain and end.
/// The files are read in chunks: a tail keeps only its last lines, so a
/// flooding container's log never sits whole in memory.
pub async fn stream(
    path: PathBuf,
    opts: LogOptions,
    tx: mpsc::Sender<Bytes>,
    running: impl Fn() -> bool + Send + 'static,
) {
    stream_chunked(path, opts, tx, running, CHUNK).await;
}

async fn stream_chunked(
    path: PathBuf,
    opts: LogOptions,
    tx: mpsc::Sender<Bytes>,
    running: impl Fn() -> bool + Send + 'static,
    chunk: usize,
) {
    let mut budget = opts.limit_bytes.unwrap_or(usize::MAX);
    let mut lines = Lines::new(log_files(&path), chunk);
    match opts.tail_lines {
        Some(n) => {
            // The last `n` full lines, each with the parts before it, and
            // the parts after the last one (kube's tail).
            let mut ring: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
            let mut group = Vec::new();
            while let Some(block) = lines.next().await {
                for raw in block.split_inclusive(|&b| b == b'\n') {
                    group.extend_from_slice(raw);
                    let text = raw.strip_suffix(b"\n").unwrap_or(raw);
                    if parse_line(text).is_some_and(|l| l.full) {
                        let line = std::mem::take(&mut group);
                        if n > 0 {
                            ring.push_back(line);
                            if ring.len() > n {
                                ring.pop_front();
                            }
                        }
                    }
                }
            }
            let mut out = Vec::new();
            if n > 0 {
                for l in ring.iter().chain(std::iter::once(&group)) {
                    render(l, &opts, &mut out);
                }
            }
            if !send_limited(&tx, out, &mut budget).await {
                return;
            }
        }
        None => {
            while let Some(block) = lines.next().await {
                let mut out = Vec::new();
                render(&block, &opts, &mut out);
                if !send_limited(&tx, out, &mut budget).await {
                    return;
                }
            }
            if budget == 0 {
                return;
            }
        }
    }
    if !opts.follow {
        return;
    }
    let mut offset = lines.follow_offset();
    let mut pending = std::mem::take(&mut lines.carry);
    let follow_opts = LogOptions {
        since_ns: None,
        ..opts.clone()
    };
    let mut buf = vec![0; chunk];
    loop {
        let alive = running();
        let Ok(mut file) = tokio::fs::File::open(&path).await else {
            return;
        };
        let len = file.metadata().await.map_or(0, |m| m.len());
        if len < offset {
            // Rotated: the live file starts again.
            offset = 0;
        }
        if len > offset && file.seek(std::io::SeekFrom::Start(offset)).await.is_ok() {
            // Read what is there now, a chunk at a time.
            while let Ok(n) = file.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                offset += n as u64;
                pending.extend_from_slice(&buf[..n]);
                let whole = pending
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let mut out = Vec::new();
                render(&pending[..whole], &follow_opts, &mut out);
                pending.drain(..whole);
                if !send_limited(&tx, out, &mut budget).await {
                    return;
                }
            }
        }
        if !alive || tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send_limited(tx: &mpsc::Sender<Bytes>, mut out: Vec<u8>, budget: &mut usize) -> bool {
    if out.is_empty() {
        return *budget > 0;
    }
    if out.len() > *budget {
        out.truncate(*budget);
    }
    *budget -= out.len();
    tx.send(Bytes::from(out)).await.is_ok() && *budget > 0
}

/// Rotate `path` when it has reached `max_size` bytes: rename it to
/// `<path>.<YYYYMMDD-hhmmss>` and drop the oldest rotated files beyond
/// `max_files - 1`; returns whether it rotated (the caller then asks the
/// runtime to reopen the log).
pub fn rotate_if_needed(path: &Path, max_size: u64, max_files: usize) -> std::io::Result<bool> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(false);
    };
    if meta.len() < max_size {
        return Ok(false);
    }
    let stamp = jiff::Zoned::now()
        .with_time_zone(jiff::tz::TimeZone::UTC)
        .strftime("%Y%m%d-%H%M%S")
        .to_string();
    let mut target = PathBuf::from(format!("{}.{stamp}", path.display()));
    let mut n = 1;
    while target.exists() {
        target = PathBuf::from(format!("{}.{stamp}.{n}", path.display()));
        n += 1;
    }
    std::fs::rename(path, &target)?;
    let files = log_files(path);
    // log_files lists the (now missing) live file last.
    let rotated = &files[..files.len() - 1];
    let keep = max_files.saturating_sub(1).max(1);
    if rotated.len() > keep {
        for old in &rotated[..rotated.len() - keep] {
            std::fs::remove_file(old)?;
        }
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-12-04T10:00:00.1Z stdout F one\n\
2026-12-04T10:00:01.123456789Z stderr F two\n\
2026-12-04T10:00:02Z stdout P thr\n\
2026-12-04T10:00:02.5Z stdout F ee\n\
2026-12-04T10:00:03Z stdout F four\n";

    /// Reading the files in chunks of any size gives what reading them
    /// whole gave, for every tail and byte limit: (options, chunk sizes).
    #[tokio::test]
    async fn chunked_reads_answer_as_whole_ones() {
        let dir = std::env::temp_dir().join(format!("kubeforge-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let live = dir.join("0.log");
        // A rotated file that ends inside a split line, then the live one.
        let (old, new) = LOG.split_at(LOG.len() / 2 + 3);
        std::fs::write(dir.join("0.log.20261204-100000"), old).expect("rotated");
        std::fs::write(&live, new).expect("live");
        let mut cases = Vec::new();
        for tail in [None, Some(0), Some(1), Some(2), Some(3), Some(99)] {
            for limit in [None, Some(1), Some(5), Some(9)] {
                cases.push(LogOptions {
                    tail_lines: tail,
                    limit_bytes: limit,
                    timestamps: limit == Some(9),
                    ..Default::default()
                });
            }
        }
        for opts in cases {
            let mut want = render_all(LOG, &opts);
            if let Some(l) = opts.limit_bytes {
                want.truncate(l);
            }
            for chunk in [1, 7, 64, CHUNK] {
                let (tx, mut rx) = mpsc::channel(1024);
                stream_chunked(live.clone(), opts.clone(), tx, || false, chunk).await;
                let mut got = Vec::new();
                while let Ok(b) = rx.try_recv() {
                    got.extend_from_slice(&b);
                }
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&want),
                    "{opts:?}, chunks of {chunk}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_join_their_parts() {
        let out = render_all(LOG, &LogOptions::default());
        assert_eq!(String::from_utf8(out).unwrap(), "one\ntwo\nthree\nfour\n");
    }

    #[test]
    fn tail_counts_whole_lines() {
        let opts = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(render_all(LOG, &opts)).unwrap(),
            "three\nfour\n"
        );
        let opts = LogOptions {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert!(render_all(LOG, &opts).is_empty());
        let opts = LogOptions {
            tail_lines: Some(99),
            ..Default::default()
        };
        assert_eq!(
            render_all(LOG, &opts).len(),
            render_all(LOG, &LogOptions::default()).len()
        );
    }

    #[test]
    fn timestamps_and_since() {
        let since = "2026-12-04T10:00:01Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_nanosecond();
        let opts = LogOptions {
            timestamps: true,
            since_ns: Some(since),
            ..Default::default()
        };
        let out = String::from_utf8(render_all(LOG, &opts)).unwrap();
        assert!(
            out.starts_with("2026-12-04T10:00:01.123456789Z two\n"),
            "{out}"
        );
        assert!(!out.contains("one"));
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        let q = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(LogOptions::from_query(&q("tailLines", "-1")).is_err());
        assert!(LogOptions::from_query(&q("limitBytes", "0")).is_err());
        assert!(LogOptions::from_query(&q("sinceTime", "yesterday")).is_err());
        let o = LogOptions::from_query(&q("follow", "true")).unwrap();
        assert!(o.follow);
    }

    #[test]
    fn rotation_keeps_max_files() {
        let dir = std::env::temp_dir().join(format!("kf-logrot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let live = dir.join("0.log");
        for i in 0..4 {
            std::fs::write(&live, vec![b'x'; 100 + i]).unwrap();
            assert!(rotate_if_needed(&live, 50, 3).unwrap());
        }
        let left = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(left, 2, "two rotated files beside the (reopened) live one");
        std::fs::write(&live, b"small").unwrap();
        assert!(!rotate_if_needed(&live, 50, 3).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
