//! How well the objects are protected, in the two shapes the API answers: a
//! single node's `objects_protection` in `/v1/status` (cairn-objects counts in
//! [`ProtectionReport`]) and a cluster's `objects` in `/v1/cluster/status`.

use serde::{Deserialize, Serialize};

/// Counts over every object.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtectionReport {
    pub objects: u64,
    /// Every fragment or copy present.
    pub protected: u64,
    /// Readable, but with fragments missing.
    pub degraded: u64,
    /// Not readable: fewer than k fragments (or no copy) left.
    pub lost: u64,
    /// Fragments (or copies) missing in all.
    pub fragments_missing: u64,
    /// Bytes those fragments hold.
    pub bytes_missing: u64,
}

/// The same counts in `cluster status` (there `total` names the objects).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtectionReportView {
    pub total: u64,
    pub protected: u64,
    pub degraded: u64,
    pub lost: u64,
    pub fragments_missing: u64,
    pub bytes_missing: u64,
}

impl From<ProtectionReport> for ProtectionReportView {
    fn from(r: ProtectionReport) -> Self {
        ProtectionReportView {
            total: r.objects,
            protected: r.protected,
            degraded: r.degraded,
            lost: r.lost,
            fragments_missing: r.fragments_missing,
            bytes_missing: r.bytes_missing,
        }
    }
}
