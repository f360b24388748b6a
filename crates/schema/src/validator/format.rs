//! The `format` keyword: which formats are checked and how.
//!
//! Numbers: `int32` and `float` are range-checked as kube-openapi does. Strings:
//! `byte`, `date-time`, `date`, `uuid*`, `ipv4`, `ipv6`, `cidr` and `mac` are
//! checked; any other format (`int-or-string`, `email`, `hostname`, ...) is accepted
//! as is, as kube-apiserver does for formats it strips.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use base64::Engine as _;
use regex::Regex;

/// A parsed `format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Format {
    /// No format, or one that is not checked.
    #[default]
    None,
    Int32,
    Int64,
    Float,
    Double,
    Byte,
    DateTime,
    Date,
    Uuid,
    Uuid3,
    Uuid4,
    Uuid5,
    Ipv4,
    Ipv6,
    Cidr,
    Mac,
}

impl Format {
    pub(crate) fn parse(s: &str) -> Format {
        match s {
            "int32" => Format::Int32,
            "int64" => Format::Int64,
            "float" => Format::Float,
            "double" => Format::Double,
            "byte" => Format::Byte,
            "date-time" | "datetime" => Format::DateTime,
            "date" => Format::Date,
            "uuid" => Format::Uuid,
            "uuid3" => Format::Uuid3,
            "uuid4" => Format::Uuid4,
            "uuid5" => Format::Uuid5,
            "ipv4" => Format::Ipv4,
            "ipv6" => Format::Ipv6,
            "cidr" => Format::Cidr,
            "mac" => Format::Mac,
            _ => Format::None,
        }
    }

    /// Whether a string satisfies this format (true for non-string formats).
    pub(crate) fn check_string(self, s: &str) -> bool {
        match self {
            Format::None | Format::Int32 | Format::Int64 | Format::Float | Format::Double => true,
            Format::Byte => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
            Format::DateTime => is_date_time(s),
            Format::Date => is_date(s),
            Format::Uuid => regexes().uuid.is_match(s),
            Format::Uuid3 => regexes().uuid3.is_match(s),
            Format::Uuid4 => regexes().uuid4.is_match(s),
            Format::Uuid5 => regexes().uuid5.is_match(s),
            Format::Ipv4 => s.parse::<Ipv4Addr>().is_ok(),
            Format::Ipv6 => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
            Format::Cidr => is_cidr(s),
            Format::Mac => regexes().mac.is_match(s),
        }
    }
}

struct Regexes {
    uuid: Regex,
    uuid3: Regex,
    uuid4: Regex,
    uuid5: Regex,
    mac: Regex,
    date_time: Regex,
}

fn regexes() -> &'static Regexes {
    static R: OnceLock<Regexes> = OnceLock::new();
    R.get_or_init(|| {
        let re = |s: &str| Regex::new(s).unwrap_or_else(|_| never_matches());
        Regexes {
            uuid: re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
            uuid3: re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
            uuid4: re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
            uuid5: re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
            mac: re(
                "^(?:[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}|[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){7}|[0-9A-Fa-f]{4}\\.[0-9A-Fa-f]{4}\\.[0-9A-Fa-f]{4})$",
            ),
            date_time: re(
                "^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})?$",
            ),
        }
    })
}

/// A regex that matches nothing (the literal patterns above always compile).
fn never_matches() -> Regex {
    #[allow(clippy::unwrap_used)]
    Regex::new("[^\\s\\S]").unwrap()
}

fn valid_date(y: &str, m: &str, d: &str) -> bool {
    match (y.parse::<i16>(), m.parse::<i8>(), d.parse::<i8>()) {
        (Ok(y), Ok(m), Ok(d)) => jiff::civil::Date::new(y, m, d).is_ok(),
        _ => false,
    }
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    s.is_char_boundary(4) && valid_date(&s[0..4], &s[5..7], &s[8..10])
}

fn is_date_time(s: &str) -> bool {
    let Some(c) = regexes().date_time.captures(s) else {
        return false;
    };
    let num = |i: usize| {
        c.get(i)
            .map_or(99, |m| m.as_str().parse::<u32>().unwrap_or(99))
    };
    valid_date(
        c.get(1).map_or("", |m| m.as_str()),
        c.get(2).map_or("", |m| m.as_str()),
        c.get(3).map_or("", |m| m.as_str()),
    ) && num(4) < 24
        && num(5) < 60
        && num(6) < 61
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_formats() {
        assert!(Format::DateTime.check_string("2024-01-02T03:04:05Z"));
        assert!(Format::DateTime.check_string("2024-01-02T03:04:05.123+02:00"));
        assert!(!Format::DateTime.check_string("2024-13-02T03:04:05Z"));
        assert!(!Format::DateTime.check_string("yesterday"));
        assert!(Format::Date.check_string("2024-02-29"));
        assert!(!Format::Date.check_string("2023-02-29"));
        assert!(Format::Byte.check_string("aGVsbG8="));
        assert!(!Format::Byte.check_string("not base64!"));
        assert!(Format::Cidr.check_string("10.0.0.0/8"));
        assert!(!Format::Cidr.check_string("10.0.0.0/33"));
        assert!(Format::Uuid.check_string("123e4567-e89b-12d3-a456-426614174000"));
        assert!(Format::Mac.check_string("00:1A:2b:3c:4d:5e"));
        assert!(Format::None.check_string("anything"));
    }
}
