//! Finding a node's admin API: the typed client itself is `cairn-adminapi`'s.

use crate::NodectlError;
use cairn_adminapi::AdminClient;
use std::path::Path;

/// The admin API of node `node` started by `nodectl dev up --data DIR` (a single
/// node is node 1).
pub fn of_dev(data: &Path, node: u16) -> Result<AdminClient, NodectlError> {
    crate::dev::admin_of(data, node)
}
