//! A small deterministic generator (xorshift64) for the crate's randomized
//! equivalence tests.

/// Xorshift64 state; never 0.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next value in `0..n`.
    pub(crate) fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
