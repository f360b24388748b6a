//! Kubernetes resource quantities ("100m", "500Mi", "1.5", "2e3"), the
//! grammar of `resource.Quantity`, parsed to
//! integers: milli-units for CPU, whole units (rounded up) for everything else,
//! as `resource.Quantity`'s `MilliValue()` and `Value()` do.

use thiserror::Error;

/// A quantity string that is not a Kubernetes quantity.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}"
)]
pub struct QuantityError(pub String);

/// Parse a quantity into thousandths of a unit (`"100m"` → 100, `"2"` → 2000),
/// rounding up. Saturates at `i64::MAX`.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    let bad = || QuantityError(s.to_string());
    let t = s.trim();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    // mantissa = digits as an integer, scaled down by 10^frac_len
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Ok(if neg { i64::MIN } else { i64::MAX });
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    // multiplier as (numerator, power of ten)
    let (mult, pow10): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| bad())?;
            if !(-30..=30).contains(&exp) {
                return Err(bad());
            }
            (1, exp)
        }
        _ => return Err(bad()),
    };
    // value × 1000 (milli) = mantissa × mult × 10^(pow10 + 3 − fraction digits)
    let total_pow = pow10 + 3 - frac_part.len() as i32;
    let mut value = mantissa.saturating_mul(mult);
    if total_pow >= 0 {
        for _ in 0..total_pow {
            value = value.saturating_mul(10);
        }
    } else {
        let den = 10i128.checked_pow((-total_pow) as u32).unwrap_or(i128::MAX);
        value = value / den + i128::from(value % den != 0); // round up
    }
    let value = value.min(i64::MAX as i128) as i64;
    Ok(if neg { -value } else { value })
}

/// Parse a quantity into whole units, rounding up (`"500Mi"` → 524288000,
/// `"100m"` → 1).
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    let milli = parse_milli(s)?;
    if milli >= 0 {
        Ok(milli / 1000 + i64::from(milli % 1000 != 0))
    } else {
        Ok(milli / 1000)
    }
}

/// A quantity of `nanos` billionths (CPU nanocores) in kube's canonical
/// DecimalSI form, as `resource.NewScaledQuantity(nanos, -9).String()`
/// prints it: the largest power-of-1000 suffix that keeps the number whole
/// (`250000000` → `"250m"`, `1500000` → `"1500u"`, `2000000000` → `"2"`).
pub fn format_nanos(nanos: i64) -> String {
    const SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    if nanos == 0 {
        return "0".to_string();
    }
    let (mut mantissa, mut step) = (nanos, 0);
    while mantissa % 1000 == 0 && step + 1 < SUFFIXES.len() {
        mantissa /= 1000;
        step += 1;
    }
    format!("{mantissa}{}", SUFFIXES[step])
}

/// A quantity of thousandths in kube's canonical DecimalSI form, as
/// `resource.NewMilliQuantity(milli, DecimalSI).String()` prints it
/// (`1500` → `"1500m"`, `2000` → `"2"`, `64000000000` → `"64M"`).
pub fn format_milli(milli: i64) -> String {
    format_nanos(milli.saturating_mul(1_000_000))
}

/// A byte count in kube's canonical BinarySI form, as
/// `resource.NewQuantity(bytes, BinarySI).String()` prints it: the largest
/// power-of-1024 suffix that keeps the number whole (`67108864` → `"64Mi"`,
/// `12288` → `"12Ki"`, `12345` → `"12345"`); under 1024 the DecimalSI form
/// (`1000` → `"1k"`), as kube does to avoid rounding.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes.unsigned_abs() < 1024 {
        return format_nanos(bytes.saturating_mul(1_000_000_000));
    }
    let (mut mantissa, mut step) = (bytes, 0);
    while mantissa % 1024 == 0 && step + 1 < SUFFIXES.len() {
        mantissa /= 1024;
        step += 1;
    }
    format!("{mantissa}{}", SUFFIXES[step])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_as_kube_prints_them() {
        assert_eq!(format_nanos(250_000_000), "250m");
        assert_eq!(format_nanos(1_500_000), "1500u");
        assert_eq!(format_nanos(2_000_000_000), "2");
        assert_eq!(format_nanos(123_456_789), "123456789n");
        assert_eq!(format_nanos(0), "0");
        assert_eq!(format_milli(1500), "1500m");
        assert_eq!(format_milli(64_000_000_000), "64M");
        assert_eq!(format_bytes(64 * 1024 * 1024), "64Mi");
        assert_eq!(format_bytes(12288), "12Ki");
        assert_eq!(format_bytes(12345), "12345");
        assert_eq!(format_bytes(1000), "1k");
        assert_eq!(format_bytes(0), "0");
    }

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("0.1").unwrap(), 100);
        assert_eq!(parse_value("500Mi").unwrap(), 500 * 1024 * 1024);
        assert_eq!(parse_value("32Gi").unwrap(), 32 << 30);
        assert_eq!(parse_value("1k").unwrap(), 1000);
        assert_eq!(parse_value("2e3").unwrap(), 2000);
        assert_eq!(parse_value("100m").unwrap(), 1);
        assert_eq!(parse_value("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(parse_milli("250u").unwrap(), 1);
        assert_eq!(parse_value("200M").unwrap(), 200_000_000);
        assert!(parse_milli("abc").is_err());
        assert!(parse_milli("1Xi").is_err());
        assert!(parse_milli("").is_err());
    }

    #[test]
    fn accepts_and_refuses_as_kube_does() {
        for ok in [
            "1", "500m", "1.5", "16Gi", "129e6", "1E3", "+2", "0.5Ki", "-1", ".5", "1e-3",
        ] {
            assert!(parse_milli(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "lots", "1..2", "5Gb", "1e", "Gi", ".", "1e+", "--1", "1 Gi",
        ] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }
}
