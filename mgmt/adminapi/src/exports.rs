//! NFS exports (`/v1/exports`, `/v1/tenants/{tenant}/buckets/{bucket}/export`):
//! which of a tenant's buckets are mounted over NFS, by which client networks,
//! and as which owner. A bucket is mounted as `/<tenant name>/<bucket>` (`root`
//! for the root key's buckets); clients are let in by their network address
//! alone (AUTH_UNIX ids, which any client can forge, decide nothing).

use serde::{Deserialize, Serialize};

/// The anonymous id (`nobody`): what files show when the export names no
/// owner.
pub const NOBODY: u32 = 65534;

/// `PUT /v1/tenants/{tenant}/buckets/{bucket}/export`: the bucket's export,
/// replacing any it had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportSpec {
    /// The client networks that may mount it, as CIDR (`10.0.0.0/8`,
    /// `fd00::/64`); a bare address is one host (`/32`, `/128`). At least one.
    pub clients: Vec<String>,
    /// The owner its files and directories show (none: [`NOBODY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Their group (none: [`NOBODY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Clients may read, never write.
    #[serde(default)]
    pub read_only: bool,
}

/// An export as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportView {
    /// The tenant's name (`root` for the root key's buckets).
    pub tenant: String,
    pub bucket: String,
    /// What clients mount: `/<tenant>/<bucket>`.
    pub path: String,
    /// The client networks, in CIDR form.
    pub clients: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub read_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_and_mode_may_be_left_out() {
        let s: ExportSpec = serde_json::from_value(serde_json::json!({
            "clients": ["10.0.0.0/8"]
        }))
        .unwrap();
        assert_eq!((s.uid, s.gid, s.read_only), (None, None, false));
        let s: ExportSpec = serde_json::from_value(serde_json::json!({
            "clients": [], "uid": 1000, "gid": null, "read_only": true
        }))
        .unwrap();
        assert_eq!((s.uid, s.gid, s.read_only), (Some(1000), None, true));
    }
}
