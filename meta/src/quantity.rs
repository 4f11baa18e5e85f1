//! Kubernetes `resource.Quantity` values as integers, for the components that compare sizes
//! (the scheduler's requests, the PV binder's capacities) without the API server's full parser.

/// A quantity in thousandths of its unit, rounded up (`Quantity.MilliValue`): "500m" is 500,
/// "2" is 2000, "1Ki" is 1,024,000. `None` when it does not parse or overflows.
pub fn milli_value(s: &str) -> Option<i64> {
    scaled(s, 3)
}

/// A quantity in its unit, rounded up (`Quantity.Value`): "1Gi" is 1,073,741,824, "100m" is 1.
pub fn value(s: &str) -> Option<i64> {
    scaled(s, 0)
}

/// `s` times 10^`exp10`, rounded up to an integer.
fn scaled(s: &str, exp10: u32) -> Option<i64> {
    let s = s.trim();
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // The value as mantissa * 10^(dec_exp) * 2^(bin_exp).
    let mut mantissa: i128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c - b'0'))?;
    }
    let mut dec_exp = -(frac_part.len() as i32) + exp10 as i32;
    let mut bin_exp = 0u32;
    match suffix {
        "" => {}
        "n" => dec_exp -= 9,
        "u" => dec_exp -= 6,
        "m" => dec_exp -= 3,
        "k" => dec_exp += 3,
        "M" => dec_exp += 6,
        "G" => dec_exp += 9,
        "T" => dec_exp += 12,
        "P" => dec_exp += 15,
        "E" => dec_exp += 18,
        "Ki" => bin_exp = 10,
        "Mi" => bin_exp = 20,
        "Gi" => bin_exp = 30,
        "Ti" => bin_exp = 40,
        "Pi" => bin_exp = 50,
        "Ei" => bin_exp = 60,
        e if e.starts_with(['e', 'E']) => dec_exp += e[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    mantissa = mantissa.checked_mul(1i128.checked_shl(bin_exp)?)?;
    let result = if dec_exp >= 0 {
        mantissa.checked_mul(10i128.checked_pow(dec_exp as u32)?)?
    } else {
        let divisor = 10i128.checked_pow((-dec_exp) as u32)?;
        // Round up, away from zero for positive amounts as Kubernetes does.
        (mantissa + divisor - 1) / divisor
    };
    let result = if negative { -result } else { result };
    i64::try_from(result).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_milli_and_plain_values() {
        assert_eq!(milli_value("500m"), Some(500));
        assert_eq!(milli_value("2"), Some(2000));
        assert_eq!(milli_value("1.5"), Some(1500));
        assert_eq!(milli_value("0.1"), Some(100));
        assert_eq!(value("1Gi"), Some(1 << 30));
        assert_eq!(value("128Mi"), Some(128 << 20));
        assert_eq!(value("1G"), Some(1_000_000_000));
        assert_eq!(value("1e3"), Some(1000));
        assert_eq!(value("100m"), Some(1), "rounds up");
        assert_eq!(milli_value("1Ki"), Some(1_024_000));
        assert_eq!(value("-1"), Some(-1));
        assert_eq!(value("abc"), None);
        assert_eq!(value("1Qi"), None);
        assert_eq!(value("99999999999E"), None, "overflow is None");
    }
}
