//! A BMC's threshold sensors: its SDR repository walked record by record (Get
//! SDR), then Get Sensor Reading for each full sensor record of threshold type,
//! converted to units by the record's factors (IPMI 2.0, 35 and 36.3). The
//! level is the BMC's own comparison with its thresholds (the reading's status
//! bits), so Cairn says what `ipmitool sdr` says.
//!
//! ipmi-rs parses the records and readings; the exchanges go through the
//! caller's transport (a [`Link`](crate::Link)'s turn and deadline, or the
//! local device's), one request at a time.

use crate::BmcError;
use cairn_adminapi::{SensorLevel, SensorView};
use ipmi_rs::connection::IpmiCommand;
use ipmi_rs::sensor_event::{GetSensorReading, ThresholdReading};
use ipmi_rs::storage::sdr::event_reading_type_code::EventReadingTypeCodes;
use ipmi_rs::storage::sdr::record::{
    FullSensorRecord, Record, ThresholdKind, WithSensorRecordCommon,
};
use ipmi_rs::storage::sdr::Unit;
use std::future::Future;
use std::time::Duration;

/// A repository longer than this is taken for a loop (real ones hold tens to a
/// few hundred records).
const MAX_RECORDS: usize = 1024;
/// Header of an SDR: record id, version, type, length of the rest.
const HEADER: usize = 5;
/// The piece of a record read at once from a BMC that refuses whole records
/// (ipmitool's choice too).
const CHUNK: u8 = 16;

/// Walks a repository again when another reader's reservation cancelled ours.
const WALKS: usize = 3;
/// How long a walk waits for another walk of the same BMC to end.
const WALK_QUEUE: Duration = Duration::from_secs(10);

/// The BMC's one walk at a time: waits for the one under way, within
/// [`WALK_QUEUE`], else the BMC is busy.
pub(crate) async fn one_walk<'a>(
    walk: &'a tokio::sync::Mutex<()>,
    addr: &str,
) -> Result<tokio::sync::MutexGuard<'a, ()>, BmcError> {
    tokio::time::timeout(WALK_QUEUE, walk.lock())
        .await
        .map_err(|_| BmcError::Busy {
            addr: addr.to_string(),
            what: "reading the sensors",
        })
}

/// Every threshold sensor of the BMC behind `request` (netfn, command, data,
/// what), with its reading now. Names are made printable, and a name the BMC
/// gives several sensors gets its sensor number (`Temp #12`).
pub(crate) async fn read<F, Fut>(addr: &str, request: F) -> Result<Vec<SensorView>, BmcError>
where
    F: Fn(u8, u8, Vec<u8>, &'static str) -> Fut,
    Fut: Future<Output = Result<Vec<u8>, BmcError>>,
{
    let mut tries = 0;
    let mut sensors = loop {
        tries += 1;
        match walk(addr, &request).await {
            // 0xc5: the reservation was cancelled (someone else reserved, or
            // the repository changed): walk again, as ipmitool does.
            Err(BmcError::Refused { cc: 0xc5, .. }) if tries < WALKS => continue,
            r => break r?,
        }
    };
    for s in sensors.iter_mut() {
        s.name = s
            .name
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
    }
    // Names are what series and alerts are known by: each must be unique. A
    // shared name gets the sensor number; a clash left over after that (two
    // records of one number, a real sensor already named so) a count.
    let names: Vec<String> = sensors.iter().map(|s| s.name.clone()).collect();
    for s in sensors.iter_mut() {
        if names.iter().filter(|n| **n == s.name).count() > 1 {
            s.name = format!("{} #{}", s.name, s.number);
        }
    }
    let mut seen = std::collections::HashSet::new();
    for s in sensors.iter_mut() {
        let mut k = 2;
        let base = s.name.clone();
        while !seen.insert(s.name.clone()) {
            s.name = format!("{base} ({k})");
            k += 1;
        }
    }
    Ok(sensors)
}

async fn walk<F, Fut>(addr: &str, request: &F) -> Result<Vec<SensorView>, BmcError>
where
    F: Fn(u8, u8, Vec<u8>, &'static str) -> Fut,
    Fut: Future<Output = Result<Vec<u8>, BmcError>>,
{
    let garbage = |what: &'static str, why: String| BmcError::Garbage {
        addr: addr.to_string(),
        what,
        why,
    };
    // Reserve SDR Repository (Storage, 0x22): partial reads need the id.
    let reservation = request(0x0a, 0x22, vec![], "reserve SDR repository").await?;
    let [r0, r1] = match reservation[..] {
        [a, b, ..] => [a, b],
        _ => {
            return Err(garbage(
                "reserve SDR repository",
                "no reservation id".into(),
            ))
        }
    };
    let mut out = Vec::new();
    let mut id = 0u16;
    // What one read may ask for: the rest of the record at first; many BMCs
    // answer only smaller pieces (completion code 0xca), then CHUNK at a time.
    let mut piece = u8::MAX;
    for _ in 0..MAX_RECORDS {
        // Get SDR (Storage, 0x23): reservation, record id, offset, bytes. The
        // header first, for the length, then the body.
        let get = |offset: u8, len: u8| {
            let [lo, hi] = id.to_le_bytes();
            request(0x0a, 0x23, vec![r0, r1, lo, hi, offset, len], "get SDR")
        };
        let head = get(0, HEADER as u8).await?;
        if head.len() != 2 + HEADER {
            return Err(garbage("get SDR", "a short header".into()));
        }
        let next = u16::from_le_bytes([head[0], head[1]]);
        let len = HEADER + head[2 + 4] as usize;
        let mut raw = head[2..].to_vec();
        while raw.len() < len {
            let want = (len - raw.len()).min(piece as usize) as u8;
            match get(raw.len() as u8, want).await {
                Ok(d) if d.len() > 2 && d.len() <= 2 + want as usize => {
                    raw.extend_from_slice(&d[2..])
                }
                Ok(d) => return Err(garbage("get SDR", format!("{} bytes for {want}", d.len()))),
                Err(BmcError::Refused { cc: 0xca, .. }) if piece > CHUNK => piece = CHUNK,
                Err(e) => return Err(e),
            }
        }
        let raw = &raw[..];
        // A record ipmi-rs cannot parse (an OEM or newer type, or a damaged
        // one) is skipped, as is a sensor owned by another controller or LUN
        // (reading it needs bridging, which Cairn does not do).
        if let Some(rec) = parse(raw) {
            if let Some(full) = threshold_sensor(&rec).filter(|_| owned_by_bmc(raw)) {
                out.push(reading(full, raw, request).await?);
            }
        }
        if next == 0xffff {
            return Ok(out);
        }
        if next == id {
            return Err(garbage(
                "get SDR",
                format!("record {id:#06x} names itself next"),
            ));
        }
        id = next;
    }
    Err(garbage(
        "get SDR",
        format!("more than {MAX_RECORDS} records (a loop)"),
    ))
}

/// ipmi-rs's parse of a full sensor record (type 1, the only kind read here);
/// none for other types, for a record too short to hold its fields and id
/// string (ipmi-rs 0.6 indexes past the end of such records), and, as a last
/// guard, when the parse fails or panics anyway.
fn parse(raw: &[u8]) -> Option<Record> {
    // The id string's type/length byte is the record's 48th; the string follows.
    let whole =
        raw.get(3) == Some(&0x01) && raw.len() >= 48 && raw.len() >= 48 + (raw[47] & 0x1f) as usize;
    if !whole {
        return None;
    }
    std::panic::catch_unwind(|| Record::parse(raw).ok())
        .ok()
        .flatten()
}

/// Whether the sensor is the BMC's own, on LUN 0 (key bytes 6 and 7).
fn owned_by_bmc(raw: &[u8]) -> bool {
    raw.get(5) == Some(&0x20) && raw.get(6).is_some_and(|l| l & 0x03 == 0)
}

/// The record, when it is a full sensor record of an analog threshold sensor.
fn threshold_sensor(rec: &Record) -> Option<&FullSensorRecord> {
    let full = rec.full_sensor()?;
    let threshold = matches!(
        full.common().event_reading_type_code,
        EventReadingTypeCodes::Threshold
    );
    (threshold && full.analog_data_format.is_some() && !full.common().capabilities.ignore)
        .then_some(full)
}

async fn reading<F, Fut>(
    full: &FullSensorRecord,
    raw: &[u8],
    request: &F,
) -> Result<SensorView, BmcError>
where
    F: Fn(u8, u8, Vec<u8>, &'static str) -> Fut,
    Fut: Future<Output = Result<Vec<u8>, BmcError>>,
{
    let common = full.common();
    let number = common.key.sensor_number.get();
    // Get Sensor Reading (Sensor/Event, 0x2d).
    let r = match request(0x04, 0x2d, vec![number], "get sensor reading").await {
        Ok(data) => GetSensorReading::parse_success_response(&data)
            .ok()
            .map(|raw| ThresholdReading::from(&raw)),
        // A sensor the BMC will not read now (0xcb "not present", 0xd5 "not
        // in this state"): unavailable, not a failed walk.
        Err(BmcError::Refused { .. }) => None,
        Err(e) => return Err(e),
    };
    let (value, level) = match r {
        Some(ThresholdReading {
            reading: Some(x),
            threshold_status,
            scanning_disabled: false,
            ..
        }) => {
            let level = match threshold_status {
                Some(s) if s.at_or_above_non_recoverable || s.at_or_below_lower_non_recoverable => {
                    SensorLevel::NonRecoverable
                }
                Some(s) if s.at_or_above_upper_critical || s.at_or_below_lower_critical => {
                    SensorLevel::Critical
                }
                Some(s) if s.at_or_above_upper_non_critical || s.at_or_below_lower_non_critical => {
                    SensorLevel::Warning
                }
                _ => SensorLevel::Ok,
            };
            (convert(raw, x), level)
        }
        _ => (None, SensorLevel::Unavailable),
    };
    // The thresholds' raw bytes sit at fixed places in a full record (bytes
    // 37..=42 of the SDR, upper non-recoverable first); ipmi-rs keeps them private.
    let places = [
        (
            ThresholdKind::UpperNonRecoverable,
            36,
            "upper non-recoverable",
        ),
        (ThresholdKind::UpperCritical, 37, "upper critical"),
        (ThresholdKind::UpperNonCritical, 38, "upper non-critical"),
        (
            ThresholdKind::LowerNonRecoverable,
            39,
            "lower non-recoverable",
        ),
        (ThresholdKind::LowerCritical, 40, "lower critical"),
        (ThresholdKind::LowerNonCritical, 41, "lower non-critical"),
    ];
    let thresholds = places
        .into_iter()
        .filter(|(k, _, _)| full.threshold(*k).readable)
        .filter_map(|(_, at, name)| Some((name.to_string(), convert(raw, *raw.get(at)?)?)))
        .collect();
    Ok(SensorView {
        name: common.sensor_id.to_string(),
        number,
        kind: common.ty.to_string(),
        unit: unit(
            common.sensor_units.base_unit,
            common.sensor_units.is_percentage,
        ),
        value,
        level,
        thresholds,
    })
}

/// A raw reading in units, by the record's own bytes (IPMI 2.0, 36.3):
/// y = L((M·x + B·10^Bexp)·10^Rexp), M and B 10-bit two's complement, the
/// exponents 4-bit two's complement, L the linearization. ipmi-rs 0.6 decodes a
/// negative M wrongly and applies no linearization, hence this. None for an
/// OEM (non-linear) formula or a result that is not a number.
fn convert(raw: &[u8], x: u8) -> Option<f64> {
    let at = |i: usize| raw.get(i).copied();
    let ten_bits = |ls: u8, ms: u8| {
        let v = (u16::from(ms >> 6) << 8) | u16::from(ls);
        if v & 0x200 != 0 {
            v as i32 - 0x400
        } else {
            v as i32
        }
    };
    let four_bits = |v: u8| {
        if v & 0x8 != 0 {
            v as i32 - 16
        } else {
            v as i32
        }
    };
    let x = match at(20)? >> 6 {
        0 => x as f64,
        1 => {
            // One's complement: negative zero is zero.
            let v = x as i8;
            if v < 0 {
                (v as i32 + 1) as f64
            } else {
                v as f64
            }
        }
        2 => x as i8 as f64,
        _ => return None,
    };
    let m = ten_bits(at(24)?, at(25)?) as f64;
    let b = ten_bits(at(26)?, at(27)?) as f64;
    let (r_exp, b_exp) = (four_bits(at(29)? >> 4), four_bits(at(29)? & 0x0f));
    let y = (m * x + b * 10f64.powi(b_exp)) * 10f64.powi(r_exp);
    let y = match at(23)? & 0x7f {
        0 => y,
        1 => y.ln(),
        2 => y.log10(),
        3 => y.log2(),
        4 => y.exp(),
        5 => 10f64.powf(y),
        6 => y.exp2(),
        7 => 1.0 / y,
        8 => y * y,
        9 => y * y * y,
        10 => y.sqrt(),
        11 => y.cbrt(),
        _ => return None,
    };
    if !y.is_finite() {
        return None;
    }
    // Rounded to what the factors can express (no 40.000000001 °C).
    let digits = (-r_exp).clamp(0, 6) + if at(23)? & 0x7f == 0 { 0 } else { 3 };
    let scale = 10f64.powi(digits);
    Some((y * scale).round() / scale)
}

/// The unit's short name (`°C`, `V`, `RPM`), empty when the SDR names none.
fn unit(u: Unit, percentage: bool) -> String {
    if percentage {
        return "%".into();
    }
    if matches!(u, Unit::Unknown(_) | Unit::Unspecified) {
        return String::new();
    }
    // ipmi-rs shows a unit only with a value ("2.00 °C").
    let shown = u.display(true, 2.0f32);
    shown
        .split_once(' ')
        .map_or(String::new(), |(_, unit)| unit.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ci/bmc-sim.sh's CPU Temp record (M 1, B 0, unsigned, linear).
    const CPU_TEMP: [u8; 56] = [
        0x00, 0x00, 0x51, 0x01, 0x33, 0x20, 0x00, 0x01, 0x03, 0x01, 0x7f, 0x48, 0x01, 0x01, 0x00,
        0x70, 0x00, 0x70, 0x18, 0x18, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00, 0x55, 0x4b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xc8, b'C', b'P', b'U', b' ', b'T', b'e', b'm', b'p',
    ];

    #[test]
    fn readings_convert_as_ipmitool_does() {
        let mut r = CPU_TEMP;
        assert_eq!(convert(&r, 40), Some(40.0));
        // M = -1 (10-bit two's complement 0x3ff).
        (r[24], r[25]) = (0xff, 0xc0);
        assert_eq!(convert(&r, 30), Some(-30.0));
        // M = 1 again, B = -2 with B exponent 1, R exponent -1: (x - 20) / 10.
        (r[24], r[25], r[26], r[27], r[29]) = (0x01, 0x00, 0xfe, 0xc0, 0xf1);
        assert_eq!(convert(&r, 45), Some(2.5));
        // Linearization 1/x.
        (r[26], r[27], r[29], r[23]) = (0, 0, 0, 7);
        assert_eq!(convert(&r, 50), Some(0.02));
        // OEM linearization, and no analog reading: no value.
        r[23] = 0x70;
        assert_eq!(convert(&r, 50), None);
        r[23] = 0;
        r[20] = 0xc0;
        assert_eq!(convert(&r, 50), None);
        // Two's complement readings.
        r[20] = 0x80;
        assert_eq!(convert(&r, 0xf6), Some(-10.0));
    }

    #[test]
    fn short_and_foreign_records_are_skipped_not_panicked_on() {
        // A full record cut short (no id string): ipmi-rs 0.6 indexes past it.
        let mut short = CPU_TEMP[..47].to_vec();
        short[4] = 42;
        assert!(parse(&short).is_none());
        // An id string longer than the record.
        let mut long_id = CPU_TEMP.to_vec();
        long_id[47] = 0xcf;
        assert!(parse(&long_id).is_none());
        for len in [15usize, 17] {
            let mut r = CPU_TEMP[..5 + len].to_vec();
            r[4] = len as u8;
            assert!(parse(&r).is_none_or(|r| threshold_sensor(&r).is_none()));
        }
        assert!(parse(&CPU_TEMP).is_some_and(|r| threshold_sensor(&r).is_some()));
        assert!(owned_by_bmc(&CPU_TEMP));
        let mut lun1 = CPU_TEMP;
        lun1[6] = 1;
        assert!(!owned_by_bmc(&lun1));
    }
}
