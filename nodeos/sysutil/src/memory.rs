//! Sizes of memory: what the machine has, and sizes as operators write them.

/// The machine's memory (MemTotal of /proc/meminfo), in bytes; `None` where
/// there is no /proc.
pub fn total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `4096`, `512K`, `64M`, `10G`, `2T` (also `10GiB`, `10GB`: binary units all).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s
        .strip_suffix("iB")
        .or_else(|| s.strip_suffix('B'))
        .unwrap_or(s);
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let shift = match unit {
        "" => 0,
        "K" | "k" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("10GiB"), Some(10 << 30));
        assert_eq!(parse_size("10GB"), Some(10 << 30));
        assert_eq!(parse_size("1X"), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("99999999999P"), None);
        assert!(total().unwrap() > 0);
    }
}
