//! placeholder, filled in below
fn main() {}
