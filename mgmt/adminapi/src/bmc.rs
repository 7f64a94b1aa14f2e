//! Each node's BMC and its power: `/v1/nodes/{node}/bmc` and
//! `/v1/nodes/{node}/power`.

use serde::{Deserialize, Serialize};

/// `PUT /v1/nodes/{node}/bmc`: how the cluster reaches the node's BMC.
#[derive(Clone, Serialize, Deserialize)]
pub struct BmcSettings {
    /// `host:port` of the BMC's RMCP+ (IPMI v2.0 LAN) service; normally port 623.
    pub address: String,
    /// A BMC user with the administrator privilege.
    pub user: String,
    /// Kept sealed by the cluster's master key; never shown again.
    pub password: String,
    /// Let the cluster power the node off (fence it) when it has been down past
    /// the repair grace, before its data is rebuilt elsewhere.
    #[serde(default)]
    pub fence: bool,
}

impl std::fmt::Debug for BmcSettings {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BmcSettings")
            .field("address", &self.address)
            .field("user", &self.user)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// A node's BMC as shown (never its password).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BmcView {
    /// Node id (hex).
    pub node: String,
    pub address: String,
    pub user: String,
    pub fence: bool,
    pub set_ms: i64,
    pub set_by: String,
    /// When the cluster powered the node off to fence it (until it is back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_ms: Option<i64>,
}

/// A power request, as `ipmitool chassis power` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerAction {
    On,
    Off,
    /// Off, then on after the BMC's interval.
    Cycle,
    /// A hard reset.
    Reset,
    /// An ACPI power-button press: the OS shuts down cleanly.
    Soft,
}

impl PowerAction {
    pub const ALL: [PowerAction; 5] = [
        PowerAction::On,
        PowerAction::Off,
        PowerAction::Cycle,
        PowerAction::Reset,
        PowerAction::Soft,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PowerAction::On => "on",
            PowerAction::Off => "off",
            PowerAction::Cycle => "cycle",
            PowerAction::Reset => "reset",
            PowerAction::Soft => "soft",
        }
    }

    pub fn parse(s: &str) -> Option<PowerAction> {
        PowerAction::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// The chassis power state a BMC reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    On,
    Off,
}

/// `POST /v1/nodes/{node}/power`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct PowerRequest {
    pub action: PowerAction,
}

/// The answer of both power routes: the state the BMC reports (after the
/// action, for a `POST`; a `cycle` or `soft` may still be under way).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PowerView {
    pub node: String,
    pub bmc: String,
    pub state: PowerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<PowerAction>,
}

/// Where a threshold sensor's reading stands against the thresholds its BMC
/// compares it with (the BMC's own comparison, as `ipmitool sdr` shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorLevel {
    Ok,
    /// Past a non-critical threshold.
    Warning,
    /// Past a critical threshold.
    Critical,
    /// Past a non-recoverable threshold.
    NonRecoverable,
    /// The BMC has no reading (scanning off, or the sensor absent).
    Unavailable,
}

impl SensorLevel {
    pub fn name(self) -> &'static str {
        match self {
            SensorLevel::Ok => "ok",
            SensorLevel::Warning => "warning",
            SensorLevel::Critical => "critical",
            SensorLevel::NonRecoverable => "non-recoverable",
            SensorLevel::Unavailable => "unavailable",
        }
    }

    /// Whether the level is one an operator must hear of.
    pub fn alerts(self) -> bool {
        matches!(
            self,
            SensorLevel::Warning | SensorLevel::Critical | SensorLevel::NonRecoverable
        )
    }
}

/// One threshold sensor of a BMC (from its SDR repository) and its reading.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SensorView {
    /// The SDR's id string (`CPU Temp`).
    pub name: String,
    pub number: u8,
    /// The IPMI sensor type (`temperature`, `voltage`, `fan`...).
    pub kind: String,
    /// `°C`, `V`, `RPM`... (empty when the SDR names none).
    pub unit: String,
    /// The reading in `unit`; none when unavailable.
    pub value: Option<f64>,
    pub level: SensorLevel,
    /// The thresholds the SDR makes readable, by name (`upper critical`), in `unit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<(String, f64)>,
}

/// `GET /v1/nodes/{node}/sensors`: a node's sensors, read now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SensorsView {
    pub node: String,
    /// Where they were read: `in-band /dev/ipmi0`, or the BMC's address.
    pub source: String,
    pub sensors: Vec<SensorView>,
}
