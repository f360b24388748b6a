//! Protobuf wire-format reading: varints, fixed-width values, length-delimited
//! payloads and skipping of fields we have no descriptor for.
//!
//! Every read is bounds-checked and reports malformed input as `Err(String)`.

/// Wire type 0: varint.
pub(crate) const VARINT: u8 = 0;
/// Wire type 1: 8 bytes, little endian.
pub(crate) const FIXED64: u8 = 1;
/// Wire type 2: length-delimited.
pub(crate) const LEN: u8 = 2;
/// Wire type 3: start of a (deprecated) group.
pub(crate) const START_GROUP: u8 = 3;
/// Wire type 4: end of a group.
pub(crate) const END_GROUP: u8 = 4;
/// Wire type 5: 4 bytes, little endian.
pub(crate) const FIXED32: u8 = 5;

/// How deeply groups may nest while being skipped.
const MAX_GROUP_DEPTH: usize = 64;

/// One field value as found on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Raw<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: the payload.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// A cursor over a protobuf-encoded buffer.
#[derive(Clone, Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Read `buf` from its start.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Whether every byte has been consumed.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Read a base-128 varint (at most 10 bytes).
    pub(crate) fn varint(&mut self) -> Result<u64, String> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err("truncated varint".into());
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err("varint overflows 64 bits".into());
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    /// Read a field key: (field number, wire type).
    pub(crate) fn key(&mut self) -> Result<(u32, u8), String> {
        let key = self.varint()?;
        let wire = (key & 7) as u8;
        let number = key >> 3;
        if number == 0 || number > 0x1fff_ffff {
            return Err(format!("invalid field number {number}"));
        }
        Ok((number as u32, wire))
    }

    /// Read `n` raw bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| format!("truncated input: need {n} bytes"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// Read a length-delimited payload.
    pub(crate) fn len_delimited(&mut self) -> Result<&'a [u8], String> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| "length overflows usize".to_string())?;
        self.bytes(len)
    }

    /// Read 4 little-endian bytes.
    pub(crate) fn fixed32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Read 8 little-endian bytes.
    pub(crate) fn fixed64(&mut self) -> Result<u64, String> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    /// Read the next field: `None` at the end of the buffer. Groups (wire
    /// types 3 and 4, unused by Kubernetes) are skipped.
    pub(crate) fn next_field(&mut self) -> Result<Option<(u32, Raw<'a>)>, String> {
        loop {
            if self.is_empty() {
                return Ok(None);
            }
            let (number, wire) = self.key()?;
            let raw = match wire {
                VARINT => Raw::Varint(self.varint()?),
                FIXED64 => Raw::Fixed64(self.fixed64()?),
                LEN => Raw::Bytes(self.len_delimited()?),
                FIXED32 => Raw::Fixed32(self.fixed32()?),
                _ => {
                    self.skip(number, wire)?;
                    continue;
                }
            };
            return Ok(Some((number, raw)));
        }
    }

    /// Skip the value of a field whose key (`number`, `wire`) was just read.
    pub(crate) fn skip(&mut self, number: u32, wire: u8) -> Result<(), String> {
        self.skip_depth(number, wire, 0)
    }

    fn skip_depth(&mut self, number: u32, wire: u8, depth: usize) -> Result<(), String> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.bytes(8).map(drop),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.bytes(4).map(drop),
            START_GROUP => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err("groups nested too deeply".into());
                }
                loop {
                    if self.is_empty() {
                        return Err(format!("unterminated group {number}"));
                    }
                    let (n, w) = self.key()?;
                    if w == END_GROUP {
                        if n != number {
                            return Err(format!("group {number} closed by end of group {n}"));
                        }
                        return Ok(());
                    }
                    self.skip_depth(n, w, depth + 1)?;
                }
            }
            END_GROUP => Err(format!("unexpected end of group {number}")),
            other => Err(format!("invalid wire type {other} for field {number}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut r = Reader::new(&[0x00, 0x01, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(r.varint(), Ok(0));
        assert_eq!(r.varint(), Ok(1));
        assert_eq!(r.varint(), Ok(300));
        assert_eq!(r.varint(), Ok(0xffff_ffff));
        assert!(r.is_empty());
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        // -1 as int64: ten bytes, last one 0x01.
        let mut minus_one = vec![0xff; 9];
        minus_one.push(0x01);
        assert_eq!(Reader::new(&minus_one).varint(), Ok(u64::MAX));
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        assert!(Reader::new(&too_big).varint().is_err());
    }

    #[test]
    fn lengths_are_bounded() {
        assert!(Reader::new(&[0x05, 1, 2]).len_delimited().is_err());
        assert_eq!(
            Reader::new(&[0x02, 1, 2]).len_delimited(),
            Ok(&[1u8, 2][..])
        );
        let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert!(Reader::new(&huge).len_delimited().is_err());
    }

    #[test]
    fn skips_every_wire_type() {
        // field 1 varint, field 2 fixed64, field 3 bytes, field 4 group{field 5 varint}, field 6 fixed32
        let buf = [
            0x08, 0x96, 0x01, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 0x02, b'h', b'i', 0x23, 0x28,
            0x01, 0x24, 0x35, 1, 2, 3, 4,
        ];
        let mut r = Reader::new(&buf);
        while !r.is_empty() {
            let (n, w) = r.key().expect("key");
            r.skip(n, w).expect("skip");
        }
        // Group closed by the wrong field number.
        let mut r = Reader::new(&[0x23, 0x2c]);
        let (n, w) = r.key().expect("key");
        assert!(r.skip(n, w).is_err());
        // Deeply nested groups are refused, not recursed into without bound.
        let deep = [0x0b_u8; 200];
        let mut r = Reader::new(&deep);
        let (n, w) = r.key().expect("key");
        assert!(r.skip(n, w).is_err());
    }

    #[test]
    fn next_field_reads_values_and_skips_groups() {
        let buf = [
            0x08, 0x2a, 0x13, 0x08, 0x01, 0x14, 0x1a, 0x01, b'x', 0x25, 1, 0, 0, 0,
        ];
        let mut r = Reader::new(&buf);
        assert_eq!(r.next_field(), Ok(Some((1, Raw::Varint(42)))));
        assert_eq!(r.next_field(), Ok(Some((3, Raw::Bytes(b"x")))));
        assert_eq!(r.next_field(), Ok(Some((4, Raw::Fixed32(1)))));
        assert_eq!(r.next_field(), Ok(None));
        assert!(Reader::new(&[0x0c]).next_field().is_err());
        assert!(Reader::new(&[0x0e]).next_field().is_err());
    }

    #[test]
    fn field_zero_is_invalid() {
        assert!(Reader::new(&[0x00]).key().is_err());
    }
}
