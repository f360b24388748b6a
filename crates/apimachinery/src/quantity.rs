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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
