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
    DataFormat, FullSensorRecord, Record, ThresholdKind, WithSensorRecordCommon,
};
use ipmi_rs::storage::sdr::Unit;
use std::future::Future;

/// A repository longer than this is taken for a loop (real ones hold tens to a
/// few hundred records).
const MAX_RECORDS: usize = 1024;
/// Header of an SDR: record id, version, type, length of the rest.
const HEADER: usize = 5;
/// The piece of a record read at once from a BMC that refuses whole records
/// (ipmitool's choice too).
const CHUNK: u8 = 16;

/// Every threshold sensor of the BMC behind `request` (netfn, command, data,
/// what), with its reading now.
pub(crate) async fn read<F, Fut>(addr: &str, request: F) -> Result<Vec<SensorView>, BmcError>
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
        // A record ipmi-rs cannot parse (an OEM or newer type) is skipped.
        if let Ok(rec) = Record::parse(raw) {
            if let Some(full) = threshold_sensor(&rec) {
                out.push(reading(full, raw, &request).await?);
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
            (convert(full, x), level)
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
        .filter_map(|(_, at, name)| Some((name.to_string(), convert(full, *raw.get(at)?)?)))
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

/// A raw reading in units: (M·x + B·10^Bexp)·10^Rexp (linear sensors; the
/// non-linear ones' formulas are applied by the same factors first).
fn convert(full: &FullSensorRecord, x: u8) -> Option<f64> {
    let x = match full.analog_data_format? {
        DataFormat::Unsigned => x as f64,
        DataFormat::OnesComplement => {
            let v = x as i8;
            if v < 0 {
                (v + 1) as f64
            } else {
                v as f64
            }
        }
        DataFormat::TwosComplement => x as i8 as f64,
    };
    let b = full.b as f64 * 10f64.powi(full.b_exponent as i32);
    let v = (full.m as f64 * x + b) * 10f64.powi(full.result_exponent as i32);
    // Rounded to what the factors can express (no 40.000000001 °C).
    let digits = (-(full.result_exponent as i32)).clamp(0, 6);
    let scale = 10f64.powi(digits);
    Some((v * scale).round() / scale)
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
