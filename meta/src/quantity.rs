//! Kubernetes `resource.Quantity`: parsing, exact arithmetic and the canonical form, shared by
//! the API server (validation, admission) and the components that compare or sum sizes (the
//! scheduler's requests, the PV binder's capacities, the quota controller's usage).
//!
//! Parsing takes `<sign><number><suffix>` with decimal SI (`m`, `k`,
//! `M`, ... and the undocumented `n`, `u`), binary SI (`Ki` ... `Ei`) and exponent (`e3`, `E-2`)
//! suffixes, held exactly as a count of nano-units.
//!
//! As in apimachinery, non-zero values are rounded away from zero to the nearest nano-unit and
//! binary-SI values are capped at 2^63-1. Magnitudes beyond what an `i128` of nano-units holds
//! (about 1.7e29) saturate; no real resource comes near.

use std::cmp::Ordering;
use std::fmt;

/// The regular expression apimachinery quotes when a quantity is malformed.
pub const QUANTITY_REGEX: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Why a string is not a quantity, worded as apimachinery's parse errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The string does not have the shape of a quantity.
    #[error("quantities must match the regular expression '{QUANTITY_REGEX}'")]
    FormatWrong,
    /// The number before the suffix does not parse.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not a known one.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the quantity was written, which Kubernetes keeps to re-serialize it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `m`, `k`, `M`, ... or no suffix.
    DecimalSI,
    /// `Ki`, `Mi`, ...
    BinarySI,
    /// `e3`, `E-2`.
    DecimalExponent,
}

/// A parsed quantity: an exact value in nano-units plus the suffix family it was written in.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;
const MAX_BINARY_NANOS: i128 = (i64::MAX as i128) * NANOS_PER_UNIT;

impl Quantity {
    /// A quantity of `n` whole units (decimal SI).
    pub fn from_units(n: i64) -> Self {
        Self {
            nanos: n as i128 * NANOS_PER_UNIT,
            format: Format::DecimalSI,
        }
    }

    /// A quantity of `m` milli-units (decimal SI), as CPU is counted.
    pub fn from_milli(m: i64) -> Self {
        Self {
            nanos: m as i128 * 1_000_000,
            format: Format::DecimalSI,
        }
    }

    /// A quantity of `n` nano-units (decimal SI), as CPU use in cores is reported
    /// (`NewScaledQuantity(n, -9)`).
    pub fn from_nano_units(n: u64) -> Self {
        Self {
            nanos: i128::from(n),
            format: Format::DecimalSI,
        }
    }

    /// A quantity of `n` bytes in binary SI (`NewQuantity(n, BinarySI)`), as memory is reported:
    /// `1Ki` for 1024, plain digits where no binary suffix divides it.
    pub fn from_bytes(n: u64) -> Self {
        Self {
            nanos: (i128::from(n) * NANOS_PER_UNIT).min(MAX_BINARY_NANOS),
            format: Format::BinarySI,
        }
    }

    /// The exact value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The suffix family it was written in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whole units, rounded away from zero and saturating at the `i64` range (`Value()`).
    pub fn value(&self) -> i64 {
        scaled(self.nanos, NANOS_PER_UNIT)
    }

    /// Milli-units, rounded away from zero and saturating (`MilliValue()`; millicores for CPU).
    pub fn milli_value(&self) -> i64 {
        scaled(self.nanos, 1_000_000)
    }

    /// Whether it is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// Whether it is a whole number of units (extended resources and hugepages must be).
    pub fn is_integer(&self) -> bool {
        self.nanos % NANOS_PER_UNIT == 0
    }

    /// The sum, saturating.
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: self.format,
        }
    }

    /// The difference, saturating; in `self`'s format.
    pub fn sub(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.format,
        }
    }
}

fn scaled(nanos: i128, per: i128) -> i64 {
    let q = nanos / per;
    let r = nanos % per;
    let q = if r > 0 {
        q + 1
    } else if r < 0 {
        q - 1
    } else {
        q
    };
    q.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    /// Kubernetes' canonical form (`Quantity.String()`): the largest suffix of the quantity's
    /// family that keeps an integer mantissa (`1.5` is `1500m`, `1.5Gi` is `1536Mi`); binary
    /// quantities below 1Ki or with a fractional part print as decimal SI.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let per_unit = NANOS_PER_UNIT as u128;
        let mut format = self.format;
        if format == Format::BinarySI && (abs < 1024 * per_unit || !abs.is_multiple_of(per_unit)) {
            format = Format::DecimalSI;
        }
        if format == Format::BinarySI {
            let mut units = abs / per_unit;
            let mut exp = 0;
            while units.is_multiple_of(1024) && exp < 6 {
                units /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return write!(f, "{sign}{units}{suffix}");
        }
        let mut mantissa = abs;
        let mut exp: i32 = -9;
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exp += 1;
        }
        let r = exp.rem_euclid(3);
        mantissa *= 10u128.pow(r as u32);
        exp -= r;
        let suffix = match (format, exp) {
            (Format::DecimalExponent, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 0) => String::new(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            (_, e) => format!("e{e}"),
        };
        write!(f, "{sign}{mantissa}{suffix}")
    }
}

impl std::str::FromStr for Quantity {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        parse(s)
    }
}

/// Parses a k8s-openapi `Quantity`.
pub fn parse_k8s(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Quantity> {
    parse(&q.0)
}

/// Parses a quantity string as `resource.ParseQuantity` does.
pub fn parse(s: &str) -> Result<Quantity> {
    if s.is_empty() {
        return Err(Error::FormatWrong);
    }
    let b = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    match b[0] {
        b'-' => {
            negative = true;
            pos = 1;
        }
        b'+' => pos = 1,
        _ => {}
    }
    let int_start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let int_digits = &s[int_start..pos];
    let mut frac_digits = "";
    let mut had_point = false;
    if pos < b.len() && b[pos] == b'.' {
        had_point = true;
        pos += 1;
        let frac_start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        frac_digits = &s[frac_start..pos];
    }
    // apimachinery treats a bare sign as zero; a lone point has no digits to parse.
    if had_point && int_digits.is_empty() && frac_digits.is_empty() {
        return Err(Error::Numeric);
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < b.len() {
        return Err(Error::FormatWrong);
    }
    let suffix = &s[suffix_start..];
    let (base2, exponent, format) = interpret_suffix(suffix).ok_or(Error::Suffix)?;

    // The mantissa as an integer of all digits, and the decimal scale its point implies.
    let digits = format!("{int_digits}{frac_digits}");
    let digits = digits.trim_start_matches('0');
    let mut scale10: i64 = -(frac_digits.len() as i64);
    let mut nanos = accumulate(digits);
    let mut inexact = false;
    if base2 {
        nanos = shift_left_saturating(nanos, exponent as u32);
    } else {
        scale10 += exponent;
    }
    // Now value = nanos * 10^scale10; bring it to nano-units.
    scale10 += 9;
    if scale10 >= 0 {
        for _ in 0..scale10.min(60) {
            nanos = nanos.saturating_mul(10);
        }
    } else {
        for _ in 0..(-scale10).min(60) {
            if !nanos.is_multiple_of(10) {
                inexact = true;
            }
            nanos /= 10;
        }
        if -scale10 > 60 && nanos != 0 {
            inexact = true;
            nanos = 0;
        }
    }
    if inexact {
        // Round away from zero to the smallest representable non-zero amount.
        nanos = nanos.saturating_add(1);
    }
    if base2 && nanos > MAX_BINARY_NANOS as u128 {
        nanos = MAX_BINARY_NANOS as u128;
    }
    let mut format = format;
    if format == Format::BinarySI && nanos > 0 && nanos < NANOS_PER_UNIT as u128 {
        format = Format::DecimalSI;
    }
    let nanos = i128::try_from(nanos).unwrap_or(i128::MAX);
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
        format,
    })
}

fn accumulate(digits: &str) -> u128 {
    let mut n: u128 = 0;
    for d in digits.bytes() {
        n = n.saturating_mul(10).saturating_add(u128::from(d - b'0'));
    }
    n
}

fn shift_left_saturating(n: u128, by: u32) -> u128 {
    if n == 0 {
        return 0;
    }
    if by >= 128 || n.leading_zeros() < by {
        u128::MAX
    } else {
        n << by
    }
}

/// (binary?, exponent, format) of a suffix, or `None` when it is not a known one.
fn interpret_suffix(suffix: &str) -> Option<(bool, i64, Format)> {
    let decimal = |e| Some((false, e, Format::DecimalSI));
    let binary = |e| Some((true, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let e: i32 = s[1..].parse().ok()?;
            Some((false, i64::from(e), Format::DecimalExponent))
        }
        _ => None,
    }
}

/// A quantity in thousandths of its unit, rounded up (`Quantity.MilliValue`): "500m" is 500,
/// "2" is 2000, "1Ki" is 1,024,000. `None` when it does not parse or leaves the `i64` range.
pub fn milli_value(s: &str) -> Option<i64> {
    in_range(s, 1_000_000)
}

/// A quantity in its unit, rounded up (`Quantity.Value`): "1Gi" is 1,073,741,824, "100m" is 1.
/// `None` when it does not parse or leaves the `i64` range.
pub fn value(s: &str) -> Option<i64> {
    in_range(s, NANOS_PER_UNIT)
}

fn in_range(s: &str, per: i128) -> Option<i64> {
    let nanos = parse(s.trim()).ok()?.nanos;
    let rounded = nanos / per + i128::from(nanos % per != 0) * nanos.signum();
    i64::try_from(rounded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> i128 {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).nanos()
    }

    #[test]
    fn decimal_binary_and_exponent_forms() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("1", 1_000_000_000),
            ("100m", 100_000_000),
            ("1.5", 1_500_000_000),
            ("0.5", 500_000_000),
            (".5", 500_000_000),
            ("1.", 1_000_000_000),
            ("+2", 2_000_000_000),
            ("-2", -2_000_000_000),
            ("1k", 1_000 * 1_000_000_000),
            ("1M", 1_000_000 * 1_000_000_000),
            ("2G", 2_000_000_000 * 1_000_000_000),
            ("1Ki", 1024 * 1_000_000_000),
            ("128Mi", 128 * 1024 * 1024 * 1_000_000_000),
            ("1.5Gi", 1536 * 1024 * 1024 * 1_000_000_000),
            ("1e3", 1_000 * 1_000_000_000),
            ("1E3", 1_000 * 1_000_000_000),
            ("12e-3", 12_000_000),
            ("5n", 5),
            ("7u", 7_000),
            ("007", 7_000_000_000),
            ("-", 0),
        ];
        for (s, want) in cases {
            assert_eq!(n(s), *want, "{s}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(parse("1Gi").unwrap().format(), Format::BinarySI);
        assert_eq!(parse("1G").unwrap().format(), Format::DecimalSI);
        assert_eq!(parse("1e9").unwrap().format(), Format::DecimalExponent);
        // Sub-unit binary quantities are re-labelled decimal, as apimachinery does.
        assert_eq!(parse("0.5Ki").unwrap().format(), Format::BinarySI);
        assert_eq!(parse("0.0001Ki").unwrap().format(), Format::DecimalSI);
    }

    #[test]
    fn usage_prints_as_the_metrics_api_does() {
        assert_eq!(
            Quantity::from_nano_units(123_456_789).to_string(),
            "123456789n"
        );
        assert_eq!(Quantity::from_nano_units(250_000_000).to_string(), "250m");
        assert_eq!(Quantity::from_nano_units(2_000_000_000).to_string(), "2");
        assert_eq!(Quantity::from_nano_units(0).to_string(), "0");
        assert_eq!(Quantity::from_bytes(3 * 1024 * 1024).to_string(), "3Mi");
        assert_eq!(Quantity::from_bytes(1_234_567).to_string(), "1234567");
        assert_eq!(Quantity::from_bytes(1000).to_string(), "1k");
        assert_eq!(Quantity::from_bytes(1_234_944).value(), 1_234_944);
    }

    #[test]
    fn rounds_up_below_a_nano_unit() {
        assert_eq!(n("0.1n"), 1);
        assert_eq!(n("1.0000000001"), 1_000_000_001);
        assert_eq!(n("-0.1n"), -1);
        assert_eq!(n("1e-20"), 1);
    }

    #[test]
    fn binary_si_is_capped_at_i64_max() {
        assert_eq!(parse("16Ei").unwrap().value(), i64::MAX);
        assert_eq!(n("16Ei"), MAX_BINARY_NANOS);
        // Decimal quantities are not capped.
        assert!(n("10E") > MAX_BINARY_NANOS);
    }

    #[test]
    fn malformed_quantities() {
        let cases: &[(&str, Error)] = &[
            ("", Error::FormatWrong),
            ("abc", Error::FormatWrong),
            ("1 Gi", Error::FormatWrong),
            ("1Gi ", Error::FormatWrong),
            ("1.2.3", Error::FormatWrong),
            ("1x", Error::FormatWrong),
            ("1ki", Error::Suffix),
            ("1mi", Error::Suffix),
            ("1e", Error::Suffix),
            ("1KiB", Error::FormatWrong),
            ("1e3.5", Error::FormatWrong),
            (".", Error::Numeric),
        ];
        for (s, want) in cases {
            assert_eq!(parse(s).unwrap_err(), *want, "{s}");
        }
        assert_eq!(
            Error::FormatWrong.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn values_and_comparison() {
        let cpu = parse("250m").unwrap();
        assert_eq!(cpu.milli_value(), 250);
        assert_eq!(cpu.value(), 1, "Value rounds up");
        assert_eq!(parse("1.5").unwrap().milli_value(), 1500);
        assert_eq!(parse("1Mi").unwrap().value(), 1_048_576);
        assert!(parse("1Gi").unwrap() > parse("1G").unwrap());
        assert_eq!(parse("1000m").unwrap(), parse("1").unwrap());
        assert_eq!(parse("1k").unwrap(), parse("1e3").unwrap());
        assert!(parse("100m").unwrap() < parse("0.2").unwrap());
        assert_eq!(Quantity::from_milli(1500), parse("1.5").unwrap());
        assert_eq!(Quantity::from_units(2), parse("2").unwrap());
        assert!(parse("1.5").unwrap().add(&parse("500m").unwrap()) == parse("2").unwrap());
        assert!(parse("2").unwrap().is_integer());
        assert!(!parse("2.5").unwrap().is_integer());
        assert!("5Mi".parse::<Quantity>().is_ok());
    }

    #[test]
    fn canonical_form_parses_back_to_the_same_value() {
        let suffixes = [
            "", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2", "n", "u",
        ];
        let mantissas = [
            "0", "1", "7", "1.5", "0.25", "1024", "999", "12.345", "100", "3.0001",
        ];
        for m in mantissas {
            for suf in suffixes {
                for sign in ["", "-"] {
                    let input = format!("{sign}{m}{suf}");
                    let q = parse(&input).unwrap();
                    let canonical = q.to_string();
                    let back = parse(&canonical).unwrap();
                    assert_eq!(back, q, "{input} -> {canonical}");
                    assert_eq!(back.to_string(), canonical, "{input}: canonical is stable");
                }
            }
        }
    }

    #[test]
    fn canonical_form() {
        let cases = [
            ("0", "0"),
            ("0Gi", "0"),
            ("1", "1"),
            ("1.5", "1500m"),
            ("1.25", "1250m"),
            ("2000m", "2"),
            ("100m", "100m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("-3k", "-3k"),
            ("1Ki", "1Ki"),
            ("1024Ki", "1Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("2048", "2048"),
            ("1e3", "1e3"),
            ("1e4", "10e3"),
            ("12e-3", "12e-3"),
            ("0.1n", "1n"),
            ("1.000001", "1000001u"),
            ("5E", "5E"),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).unwrap().to_string(), want, "{input}");
        }
        assert!("5Mi".parse::<Quantity>().is_ok());
    }

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
