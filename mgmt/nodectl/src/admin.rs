//! Finding a node's admin API: the typed client itself is `cairn-adminapi`'s.

use crate::dev::DevState;
use crate::devcluster::DevCluster;
use crate::{io_err, NodectlError};
use cairn_adminapi::AdminClient;
use std::path::Path;

/// The admin API of a node started by `nodectl dev up --data DIR`: node `node` of a
/// local cluster, or the single node (which is node 1).
pub fn of_dev(data: &Path, node: u16) -> Result<AdminClient, NodectlError> {
    let run = data.join("run/dev.json");
    let raw = std::fs::read(&run).map_err(io_err(format!(
        "read {} (is `nodectl dev up --data {}` running?)",
        run.display(),
        data.display()
    )))?;
    if serde_json::from_slice::<DevCluster>(&raw).is_ok() {
        return crate::devcluster::admin_of(data, node);
    }
    let single: DevState = serde_json::from_slice(&raw).map_err(|e| {
        NodectlError::Usage(format!(
            "{} describes neither a node nor a local cluster: {e}",
            run.display()
        ))
    })?;
    if node != 1 {
        return Err(NodectlError::Usage(format!(
            "{} is a single node: there is no node {node}",
            data.display()
        )));
    }
    Ok(AdminClient::for_state_dir(
        &single.admin,
        &data.join("state"),
    )?)
}
