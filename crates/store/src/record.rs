//! The log's record format: `[len u32 LE][crc32 u32 LE][payload; len]`,
//! the CRC covering the payload, which is
//! `[op u8][revision u64][create_revision u64][version u64][key_len u32][key][value_len u32][value]`
//! (little-endian). Op is put (the key's whole new state), delete (key and
//! revision), snapshot (the revision a rewritten log starts from) or
//! snapshot-put (one live key of that snapshot). A log file starts with an
//! 8-byte magic.
//!
//! Decoding tells a record that does not check out (checksum, length, or
//! the file ends inside it: [`Next::Bad`]) from one that checks out but
//! makes no sense ([`StoreError::Corrupt`]); whether a bad record is a torn
//! tail or corruption is the log's call ([`crate::wal`]), which looks at what
//! follows it ([`intact_record_at`]). The CRC is CRC-32 (IEEE, the
//! polynomial of zlib and etcd's WAL) through `crc32fast`.

use std::io::{self, Read};

use bytes::Bytes;

use crate::{Event, EventKind, Revision, StoreError};

/// First bytes of every log file (format version in the last byte).
pub(crate) const MAGIC: &[u8; 8] = b"KFWAL\0\0\x01";
pub(crate) const OP_PUT: u8 = 1;
pub(crate) const OP_DELETE: u8 = 2;
pub(crate) const OP_SNAPSHOT: u8 = 3;
pub(crate) const OP_SNAPSHOT_PUT: u8 = 4;
/// `[len][crc]`.
pub(crate) const FRAME_HEADER: usize = 8;
/// op + three u64 + two u32 lengths.
const PAYLOAD_HEADER: usize = 1 + 8 + 8 + 8 + 4 + 4;
/// Largest payload a record may have.
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;

/// Appends one framed record to `buf`.
pub(crate) fn encode(
    buf: &mut Vec<u8>,
    op: u8,
    revision: Revision,
    create_revision: Revision,
    version: u64,
    key: &str,
    value: &[u8],
) {
    let payload_len = PAYLOAD_HEADER + key.len() + value.len();
    let start = buf.len();
    buf.reserve(FRAME_HEADER + payload_len);
    // Lengths were checked against MAX_PAYLOAD when the write was accepted.
    buf.extend_from_slice(&(payload_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(op);
    buf.extend_from_slice(&revision.to_le_bytes());
    buf.extend_from_slice(&create_revision.to_le_bytes());
    buf.extend_from_slice(&version.to_le_bytes());
    buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
    buf.extend_from_slice(value);
    let crc = crc32fast::hash(&buf[start + FRAME_HEADER..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

pub(crate) fn encode_event(buf: &mut Vec<u8>, event: &Event) {
    let kv = &event.kv;
    match event.kind {
        EventKind::Put => encode(
            buf,
            OP_PUT,
            kv.mod_revision,
            kv.create_revision,
            kv.version,
            &kv.key,
            &kv.value,
        ),
        EventKind::Delete => encode(buf, OP_DELETE, kv.mod_revision, 0, 0, &kv.key, &[]),
    }
}

/// One decoded record.
pub(crate) struct Record {
    pub(crate) op: u8,
    pub(crate) revision: Revision,
    pub(crate) create_revision: Revision,
    pub(crate) version: u64,
    pub(crate) key: String,
    pub(crate) value: Bytes,
}

/// What reading the next record found.
pub(crate) enum Next {
    Record(Record),
    /// Clean end of file.
    End,
    /// An incomplete or damaged record (why): a torn tail or corruption.
    Bad(&'static str),
}

/// Reads into `buf` until it is full or the input ends; returns bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct Cursor<'a> {
    data: &'a [u8],
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], StoreError> {
        if self.data.len() < n {
            return Err(StoreError::Corrupt(
                "record fields overrun the record".into(),
            ));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }
    fn u64(&mut self) -> Result<u64, StoreError> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn u32_len(&mut self) -> Result<usize, StoreError> {
        let b = self.take(4)?;
        let mut a = [0; 4];
        a.copy_from_slice(b);
        Ok(u32::from_le_bytes(a) as usize)
    }
}

/// Reads one record. `Err` only for I/O failures and for records whose
/// checksum is valid but whose contents make no sense (real corruption or a
/// bug, not a torn write).
pub(crate) fn read_record(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Next, StoreError> {
    let mut header = [0u8; FRAME_HEADER];
    match read_full(r, &mut header)? {
        0 => return Ok(Next::End),
        FRAME_HEADER => {}
        _ => return Ok(Next::Bad("truncated record header")),
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if !(PAYLOAD_HEADER..=MAX_PAYLOAD).contains(&len) {
        return Ok(Next::Bad("impossible record length"));
    }
    payload.clear();
    payload.resize(len, 0);
    if read_full(r, payload)? != len {
        return Ok(Next::Bad("truncated record payload"));
    }
    if crc32fast::hash(payload) != crc {
        return Ok(Next::Bad("record checksum mismatch"));
    }
    let mut c = Cursor { data: payload };
    let op = c.take(1)?[0];
    let revision = c.u64()?;
    let create_revision = c.u64()?;
    let version = c.u64()?;
    let key_len = c.u32_len()?;
    let key = String::from_utf8(c.take(key_len)?.to_vec())
        .map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))?;
    let value_len = c.u32_len()?;
    let value = Bytes::copy_from_slice(c.take(value_len)?);
    if !c.data.is_empty() {
        return Err(StoreError::Corrupt("trailing bytes in record".into()));
    }
    Ok(Next::Record(Record {
        op,
        revision,
        create_revision,
        version,
        key,
        value,
    }))
}

/// Whether an intact record (a plausible length, all of it inside `buf`, a
/// matching checksum) starts at `buf[at..]`.
pub(crate) fn intact_record_at(buf: &[u8], at: usize) -> bool {
    let Some(header) = buf.get(at..at + FRAME_HEADER) else {
        return false;
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if !(PAYLOAD_HEADER..=MAX_PAYLOAD).contains(&len) {
        return false;
    }
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    buf.get(at + FRAME_HEADER..at + FRAME_HEADER + len)
        .is_some_and(|payload| crc32fast::hash(payload) == crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8]) -> (Vec<Record>, Option<&'static str>) {
        let mut r = bytes;
        let mut out = Vec::new();
        let mut payload = Vec::new();
        loop {
            match read_record(&mut r, &mut payload) {
                Ok(Next::Record(rec)) => out.push(rec),
                Ok(Next::End) => return (out, None),
                Ok(Next::Bad(why)) => return (out, Some(why)),
                Err(e) => panic!("unexpected error {e}"),
            }
        }
    }

    #[test]
    fn round_trip_and_torn_tails() {
        let mut buf = Vec::new();
        encode(&mut buf, OP_PUT, 7, 3, 2, "/a/b", b"{\"x\":1}");
        encode(&mut buf, OP_DELETE, 8, 0, 0, "/a/b", b"");
        let (recs, torn) = decode_all(&buf);
        assert!(torn.is_none());
        assert_eq!(recs.len(), 2);
        assert_eq!(
            (
                recs[0].op,
                recs[0].revision,
                recs[0].create_revision,
                recs[0].version
            ),
            (OP_PUT, 7, 3, 2)
        );
        assert_eq!(recs[0].key, "/a/b");
        assert_eq!(&recs[0].value[..], b"{\"x\":1}");
        assert_eq!((recs[1].op, recs[1].revision), (OP_DELETE, 8));

        // Every truncation point of the second record is torn, never an error.
        let first_len = FRAME_HEADER + PAYLOAD_HEADER + 4 + 7;
        for cut in first_len + 1..buf.len() {
            let (recs, torn) = decode_all(&buf[..cut]);
            assert_eq!(recs.len(), 1);
            assert!(torn.is_some());
        }
        // A flipped bit anywhere in the second record is caught.
        for i in first_len..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            let (recs, torn) = decode_all(&bad);
            assert_eq!(recs.len(), 1, "flip at {i}");
            assert!(torn.is_some());
        }
    }

    #[test]
    fn checksum_is_crc32_ieee_as_logs_were_written() {
        // The store's own table-driven CRC gave these: crc32fast computes
        // the same polynomial, so existing logs still open.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            crc32fast::hash(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn valid_checksum_with_bad_fields_is_corrupt() {
        // A record whose key length points past the payload.
        let mut payload = vec![OP_PUT];
        payload.extend_from_slice(&1u64.to_le_bytes());
        payload.extend_from_slice(&1u64.to_le_bytes());
        payload.extend_from_slice(&1u64.to_le_bytes());
        payload.extend_from_slice(&1000u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        let mut buf = (payload.len() as u32).to_le_bytes().to_vec();
        buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        buf.extend_from_slice(&payload);
        let mut r = &buf[..];
        let mut scratch = Vec::new();
        assert!(matches!(
            read_record(&mut r, &mut scratch),
            Err(StoreError::Corrupt(_))
        ));
    }
}
