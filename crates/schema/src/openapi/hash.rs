//! A stable content hash for `/openapi/v3` URLs (`?hash=<hex>`).
//!
//! kube-apiserver uses SHA-512; clients treat the value as opaque, so a 128-bit
//! FNV-1a pair over the document bytes serves: stable across processes, and it
//! changes whenever the document does.

/// Uppercase hex of a 128-bit hash of `bytes`.
pub(crate) fn hash_hex(bytes: &[u8]) -> String {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    for &byte in bytes {
        a ^= u64::from(byte);
        a = a.wrapping_mul(PRIME);
        b = b.rotate_left(5) ^ u64::from(byte);
        b = b.wrapping_mul(PRIME);
    }
    format!("{a:016X}{b:016X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_sensitive() {
        assert_eq!(hash_hex(b"abc"), hash_hex(b"abc"));
        assert_ne!(hash_hex(b"abc"), hash_hex(b"abd"));
        assert_eq!(hash_hex(b"").len(), 32);
    }
}
